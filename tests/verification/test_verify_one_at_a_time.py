"""verify holds one model's session at a time (the original's is freed before the optimized
model's is made), and where a model's process is killed or crashes, the report still says
what was run and compared before."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import weakref

import pytest

import onnxopt
from onnxopt import evaluation
from onnxopt.isolation import isolated
from onnxopt.verification import NotVerified, compare
from onnxopt.verification.runs import run_optimized, run_original

MODEL = """
agraph (float[batch, seq] x) => (float[batch, seq] y, float[batch, seq] z) <float[1] w = {2.0}> {
  y = Mul (x, w)
  z = Relu (y)
}
"""
# A seeded random node whose first attempt (length 7, refused by the reflect Pad) draws noise:
# the original's session is made twice (the rerun), still never beside another.
RANDOM_RETRIED = """
agraph (float[batch, samples] x) => (float[batch, samples] y) {
  noise = RandomNormalLike <dtype = 1> (x)
  pads = Constant <value = int64[4] {0, 40, 0, 40}> ()
  padded = Pad <mode = "reflect"> (noise, pads)
  starts = Constant <value = int64[1] {40}> ()
  ends = Constant <value = int64[1] {-40}> ()
  axes = Constant <value = int64[1] {1}> ()
  y = Slice (padded, starts, ends, axes)
}
"""


@pytest.fixture
def sessions(monkeypatch):
    """Instrument the session factory: every session made (its model, in order) and the
    most alive at once."""
    made: list[str] = []
    state = {"alive": 0, "most": 0}
    real = evaluation.session

    def gone():
        state["alive"] -= 1

    def counting(model, *args, **kwargs):
        sess = real(model, *args, **kwargs)
        made.append(model if isinstance(model, str) else "<bytes or proto>")
        state["alive"] += 1
        state["most"] = max(state["most"], state["alive"])
        weakref.finalize(sess, gone)
        return sess

    monkeypatch.setattr(evaluation, "session", counting)
    return made, state


def test_the_two_sessions_are_never_alive_at_once(make_model, write_model, sessions):
    made, state = sessions
    original = str(write_model(MODEL, "a.onnx"))
    optimized = str(write_model(MODEL, "b.onnx"))
    report = onnxopt.verify(original, optimized, runs=3)
    assert report.ok and report.compared_runs == 3
    assert made == [original, optimized] and state["most"] == 1 and state["alive"] == 0


def test_one_session_at_a_time_with_a_rerun_for_seeded_random_nodes(make_model, sessions):
    made, state = sessions
    report = onnxopt.verify(make_model(RANDOM_RETRIED), make_model(RANDOM_RETRIED), runs=2)
    assert report.ok and report.bitwise and report.seeded == ["RandomNormalLike noise"]
    assert len(made) == 3 and state["most"] == 1  # original, its rerun, optimized


def test_a_failing_optimized_model_frees_its_session(make_model, sessions):
    _, state = sessions
    broken = make_model(MODEL.replace("z = Relu (y)", "t = Constant <value = int64[2] {3, 4}> "
                                      "()\n  z = Reshape (y, t)"))
    report = onnxopt.verify(make_model(MODEL), broken, runs=2)
    assert not report.ok and report.fails.startswith("the optimized model fails on x[1, 7]")
    assert state["most"] == 1 and state["alive"] == 0


def _killed_after_one_run(fn, model, providers, folder, count, seeds):
    """The optimized model's child, killed (as the kernel's OOM killer does) after one run."""
    fn(model, providers, folder, 1, seeds)
    os.kill(os.getpid(), signal.SIGKILL)


def _aborted_after_one_run(fn, model, providers, folder, count, seeds):
    """The optimized model's child, aborting in native code after one run."""
    fn(model, providers, folder, 1, seeds)
    faulthandler.disable()  # pytest's dump of the abort is noise here
    os.abort()


def _killed_loading(fn, *args):
    os.kill(os.getpid(), signal.SIGKILL)


def _children(optimized_child=None, original_child=None):
    """A ``call`` for :func:`compare._verify`: each model in a forked child, as verify runs
    them, with the given stand-ins for the children."""
    def call(fn, *args):
        stand_in = {run_optimized: optimized_child, run_original: original_child}.get(fn)
        return isolated(stand_in, fn, *args) if stand_in else isolated(fn, *args)
    return call


def test_a_killed_optimized_model_still_reports_what_was_compared(make_model):
    with pytest.raises(NotVerified) as caught:
        compare._verify(make_model(MODEL), make_model(MODEL),
                        _children(optimized_child=_killed_after_one_run), {"runs": 3})
    report = caught.value.report
    assert str(caught.value) == (
        "could not verify: ONNX Runtime was killed (signal SIGKILL: out of memory, or stopped "
        "from outside) running the optimized model on run 2 of 3 (1 runs compared before)")
    assert len(report.runs) == 3 and report.compared_runs == 1
    assert all(o.compared and o.bitwise for o in report.outputs) and not report.ok
    assert "compared on 1 of 3 runs" in report.notes()


def test_an_optimized_model_killed_while_loading_says_so(make_model):
    with pytest.raises(NotVerified) as caught:
        compare._verify(make_model(MODEL), make_model(MODEL),
                        _children(optimized_child=_killed_loading), {"runs": 2})
    assert str(caught.value) == (
        "could not verify: ONNX Runtime was killed (signal SIGKILL: out of memory, or stopped "
        "from outside) loading the optimized model (0 runs compared before)")
    assert len(caught.value.report.runs) == 2 and caught.value.report.compared_runs == 0


def _original_killed_after_one_run(fn, model, providers, folder, job):
    """The original's child, killed once it has written its first run."""
    import dataclasses

    fn(model, providers, folder, dataclasses.replace(job, runs=1, long_sequence=None))
    os.kill(os.getpid(), signal.SIGKILL)


def test_an_original_killed_running_keeps_the_runs_it_finished(make_model):
    with pytest.raises(NotVerified) as caught:
        compare._verify(make_model(MODEL), make_model(MODEL),
                        _children(original_child=_original_killed_after_one_run), {"runs": 3})
    assert str(caught.value).endswith("running the original model (after 1 runs)")
    assert caught.value.report.runs == [{"x": (1, 7)}]


def test_a_crashing_optimized_model_is_a_failure_not_a_kill(make_model):
    report = compare._verify(make_model(MODEL), make_model(MODEL),
                             _children(optimized_child=_aborted_after_one_run), {"runs": 2})
    assert not report.ok and report.unverified is None
    assert report.fails == ("the optimized model crashes ONNX Runtime (signal SIGABRT) on run "
                            "2 of 2, where the original runs")


def test_a_killed_original_says_where(make_model):
    with pytest.raises(NotVerified) as caught:
        compare._verify(make_model(MODEL), make_model(MODEL),
                        _children(original_child=_killed_loading), {"runs": 2})
    assert str(caught.value) == ("could not verify: ONNX Runtime was killed (signal SIGKILL: "
                                 "out of memory, or stopped from outside) loading the original "
                                 "model")
    assert caught.value.report.runs == [] and not caught.value.report.ok


def test_the_command_prints_and_writes_what_it_knows_when_killed(write_model, tmp_path, cli,
                                                                  monkeypatch):
    monkeypatch.setattr(compare, "_in_child", _children(optimized_child=_killed_after_one_run))
    a, b = write_model(MODEL, "a.onnx"), write_model(MODEL, "b.onnx")
    rc, out, err = cli("verify", a, b, "--json", tmp_path / "r.json")
    assert rc == 1 and err.count("\n") == 1
    assert err.startswith("onnxopt: error: could not verify: ONNX Runtime was killed")
    assert "runs: x[1, 7]; x[2, 16]; x[1, 29]" in out and "compared on 1 of 3 runs" in out
    assert "verify: not verified" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ok"] is False and data["compared_runs"] == 1
    assert data["unverified"].startswith("ONNX Runtime was killed")
    assert data["error"] == err.removeprefix("onnxopt: error: ").rstrip("\n")


def test_optimize_verify_prints_what_it_knows_when_killed(write_model, tmp_path, cli,
                                                          monkeypatch):
    monkeypatch.setattr(compare, "_in_child", _children(optimized_child=_killed_after_one_run))
    rc, out, err = cli("optimize", write_model(MODEL), "-o", tmp_path / "o.onnx", "--verify")
    assert rc == 1 and err.count("\n") == 1
    assert err.startswith("onnxopt: error: could not verify: ONNX Runtime was killed")
    assert "compared on 1 of 2 runs" in out and "verify: not verified" in out
