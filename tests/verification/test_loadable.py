"""The safeguard's checks on a staged file: they load the file itself, as the user will."""

from __future__ import annotations

import onnx
import pytest

from onnxopt.exporter.save import stage_bytes
from onnxopt.verification import loadable
from onnxopt.verification.loadable import fitness

RELU = """
g (float[n] x) => (float[n] y) {
    y = Relu (x)
}"""


def test_a_staged_file_that_loads_passes(make_model, tmp_path):
    model = make_model(RELU)
    staged = stage_bytes([model.SerializeToString()], str(tmp_path / "o.onnx"))
    found = fitness(model, staged=staged.tmp)
    assert found.problems() == [] and found.unchecked is None


def test_the_checks_load_the_staged_file_not_the_proto(make_model, tmp_path):
    """The file is what gets written: a file ORT refuses fails the checks, whatever the proto
    in memory says, and the problem names no temporary file."""
    model = make_model(RELU)
    broken = onnx.ModelProto()
    broken.CopyFrom(model)
    broken.graph.node[0].op_type = "NoSuchOp"
    staged = stage_bytes(broken.SerializeToString(), str(tmp_path / "o.onnx"))
    found = fitness(model, staged=staged.tmp)
    assert found.loads is not None and found.loads.startswith("ONNX Runtime cannot load it")
    assert found.checker is not None and "NoSuchOp" in found.checker
    for problem in found.problems():
        assert staged.tmp not in problem and ".tmp" not in problem


def test_a_staged_file_that_vanished_is_a_problem_not_a_crash(make_model, tmp_path):
    model = make_model(RELU)
    staged = stage_bytes(model.SerializeToString(), str(tmp_path / "o.onnx"))
    staged.discard()
    found = fitness(model, staged=str(tmp_path / ".gone.tmp"))
    assert found.loads is not None and found.checker is not None


@pytest.mark.parametrize("check", ["result", "input"])
def test_the_load_check_leaves_out_what_decides_nothing_about_loading(make_model, tmp_path,
                                                                      monkeypatch, check):
    """The load check's session (the result's, and an input's with external data) has ORT's
    graph optimizations, but no prepacking, no search for freed buffers to share, and no
    intra-op threads: the three cost most of a large model's load and refuse nothing
    (LOAD_CHECK_CONFIG, LOAD_CHECK_OPTIONS)."""
    import onnxruntime

    made = []
    real = onnxruntime.InferenceSession

    def spy(source, options, **kwargs):
        made.append(options)
        return real(source, options, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", spy)
    path = str(tmp_path / "m.onnx")
    onnx.save_model(make_model(RELU), path)
    if check == "result":
        assert loadable._load_problem(path, False) == (None, None)
    else:
        assert loadable._file_checks(path) == (None, None, None)
    (options,) = made
    assert options.enable_mem_reuse is False and options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.disable_prepacking") == "1"
    assert options.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL


FAILS = "ONNX Runtime cannot load it: x"
FAILS_UNOPTIMIZED = "ONNX Runtime cannot load it, even with its graph optimizations off, as..."


@pytest.mark.parametrize(("input_unoptimized", "result_unoptimized", "problems"), [
    (None, None, []),  # both load with ORT's optimizations off: the result runs where it did
    (None, FAILS_UNOPTIMIZED, [FAILS_UNOPTIMIZED]),  # the input does there; the result not
    (FAILS, FAILS_UNOPTIMIZED, []),  # neither loads at all: nothing is lost
])
def test_a_result_must_load_without_optimizations_where_the_input_does(
        input_unoptimized, result_unoptimized, problems):
    """Where ORT's default session refuses the input too (its own optimizations break it:
    fuzz run 54, declared shapes only the unoptimized load takes), the result must still
    load in a session with the optimizations off wherever the input does."""
    baseline = loadable.Fitness(loads=FAILS, loads_unoptimized=input_unoptimized)
    result = loadable.Fitness(loads=FAILS, loads_unoptimized=result_unoptimized)
    assert result.problems(baseline) == problems
    assert result.problems() == [FAILS]  # against no baseline, the default load decides
    assert loadable.Fitness().problems(baseline) == []


def test_the_load_without_optimizations_is_tried_only_where_the_default_fails(monkeypatch):
    tried = []

    def session(source, *, optimize=True, **kwargs):
        tried.append(optimize)
        if optimize:
            raise RuntimeError("[ShapeInferenceError] shape input must be 1D tensor")

    monkeypatch.setattr(loadable.evaluation, "session", session)
    default, unoptimized = loadable._load_problem(b"model", False)
    assert tried == [True, False] and unoptimized is None
    assert default == ("ONNX Runtime cannot load it: "
                       "[ShapeInferenceError] shape input must be 1D tensor")
    monkeypatch.setattr(loadable.evaluation, "session", lambda source, **kwargs: None)
    assert loadable._load_problem(b"model", False) == (None, None)


def test_a_setting_this_ort_lacks_is_left_to_its_default(make_model, tmp_path, monkeypatch):
    """An older ONNX Runtime without one of the load check's settings loads as it always did,
    rather than refusing every result (setting an unknown attribute raises)."""
    monkeypatch.setitem(loadable.LOAD_CHECK_OPTIONS, "a_setting_of_a_later_ort", False)
    path = str(tmp_path / "m.onnx")
    onnx.save_model(make_model(RELU), path)
    assert loadable._load_problem(path, False) == (None, None)
    assert "a_setting_of_a_later_ort" not in loadable._load_check_options()
    assert loadable._load_check_options()["enable_mem_reuse"] is False


def test_a_load_that_crashed_stands_for_both_loads(make_model, monkeypatch):
    """Where ORT's load crashed, nothing is known of its load without optimizations: the
    crash is the answer for both, so an input that crashed forgives what it forgave before."""
    from onnxopt.isolation import NativeCrash

    class Crashed:
        def result(self):
            raise NativeCrash("signal SIGSEGV")

    monkeypatch.setattr(loadable.ort_helper, "submit", lambda *args: Crashed())
    model = make_model(RELU)
    found = loadable.native_checks(model, model.SerializeToString())
    assert found["loads"] == found["loads_unoptimized"] == (
        "ONNX Runtime crashes on it (signal SIGSEGV)")
    assert found["checker"] is None
