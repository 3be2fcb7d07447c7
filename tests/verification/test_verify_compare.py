"""``verify``: per-output max abs/rel errors, tolerances by dtype, and the inputs it makes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnxopt
from onnxopt.errors import ModelError
from onnxopt.evaluation.sizes import padding_mask
from onnxopt.verification import make_inputs
from onnxopt.verification.compare import OutputDiff, _accumulate
from onnxopt.verification.inputs import size_sets

ADD_W = """
agraph (float[batch, seq] x) => (float[batch, seq] y) <float[1] w = {1.0}> {
  y = Add (x, w)
}
"""


def _with_weight(make_model, value: float) -> onnx.ModelProto:
    proto = make_model(ADD_W)
    proto.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(np.array([value], dtype=np.float32), "w"))
    return proto


def test_identical_models_are_bitwise_equal(make_model):
    report = onnxopt.verify(make_model(ADD_W), make_model(ADD_W), runs=3)
    assert report.ok and report.bitwise
    (out,) = report.outputs
    assert (out.name, out.dtype, out.max_abs, out.max_rel, out.tolerance) == (
        "y", "float32", 0.0, 0.0, 1e-4)
    assert [r["x"] for r in report.runs] == [(1, 7), (2, 16), (1, 29)]
    assert report.long_run_skipped is None  # nothing in it switches plans with the length


def test_changed_weight_gives_max_abs_and_rel(make_model):
    report = onnxopt.verify(_with_weight(make_model, 1.0), _with_weight(make_model, 1.5))
    (out,) = report.outputs
    assert not report.ok and not out.bitwise
    assert out.max_abs == pytest.approx(0.5, rel=1e-6)
    # per run: the error relative to the original's largest |output|; then the worst run
    feeds = [make_inputs(make_model(ADD_W), s, seed=k) for k, s in enumerate(size_sets(2))]
    rel = max(0.5 / float(np.abs(f["x"] + np.float32(1.0)).max()) for f in feeds)
    assert out.max_rel == pytest.approx(rel, rel=1e-5)
    data = report.to_json()
    assert data["ok"] is False and data["outputs"][0]["max_abs"] == out.max_abs


def test_difference_under_tolerance_is_ok_but_not_bitwise(make_model):
    report = onnxopt.verify(_with_weight(make_model, 1.0), _with_weight(make_model, 1.0 + 1e-6))
    assert report.ok and not report.bitwise
    report = onnxopt.verify(_with_weight(make_model, 1.0), _with_weight(make_model, 1.0 + 1e-6),
                            rtol=1e-9)
    assert not report.ok


@pytest.mark.parametrize("a, b, abs_, rel, ok", [
    (np.array([1, 2, 3]), np.array([1, 2, 4]), 1.0, float("inf"), False),
    (np.array([1.0, np.nan], np.float32), np.array([1.0, np.nan], np.float32), 0.0, 0.0, True),
    (np.array([1.0, np.nan], np.float32), np.array([1.0, 2.0], np.float32), float("inf"),
     float("inf"), False),
    (np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), float("inf"), float("inf"),
     False),
    (np.array([True, False]), np.array([True, False]), 0.0, 0.0, True),
])
def test_accumulate(a, b, abs_, rel, ok):
    diff = OutputDiff("o", str(a.dtype), tolerance=1e-4 if a.dtype.kind == "f" else 0.0)
    _accumulate(diff, a, b)
    assert (diff.max_abs, diff.max_rel, diff.ok) == (abs_, rel, ok)


@pytest.mark.parametrize("a, b, rtol, atol, ok", [
    # 0.02 off on 100: rtol 1e-4 allows 0.01; with atol 0.01 the sum allows 0.02
    (np.array([100.0], np.float32), np.array([100.02], np.float32), 1e-4, 0.0, False),
    (np.array([100.0], np.float32), np.array([100.02], np.float32), 1e-4, 0.011, True),
    # near zero, relative error alone fails whatever the rtol; atol passes it
    (np.array([0.0, 1e-6], np.float32), np.array([1e-5, 1e-6], np.float32), 1e-2, 0.0, False),
    (np.array([0.0, 1e-6], np.float32), np.array([1e-5, 1e-6], np.float32), 0.0, 1e-4, True),
    # an infinity only one side has is a mismatch, not a skipped element
    (np.array([np.inf, 1.0], np.float32), np.array([1.0, 1.0], np.float32), 1e-4, 1.0, False),
    (np.array([np.inf, 1.0], np.float32), np.array([np.inf, 1.0], np.float32), 1e-4, 0.0, True),
    (np.array(["a", "b"]), np.array(["a", "c"]), 1e-4, 1.0, False),
    (np.array(["a", "b"]), np.array(["a", "b"]), 0.0, 0.0, True),
])
def test_atol_and_rtol_per_run(a, b, rtol, atol, ok):
    diff = OutputDiff("o", str(a.dtype), tolerance=rtol, atol=atol)
    _accumulate(diff, a, b)
    assert diff.ok is ok


def test_every_run_must_be_within_tolerance():
    """A run far within tolerance does not excuse one beyond it (the bound is per run)."""
    diff = OutputDiff("o", "float32", tolerance=0.0, atol=0.01)
    _accumulate(diff, np.array([1.0], np.float32), np.array([1.0], np.float32))
    _accumulate(diff, np.array([1.0], np.float32), np.array([1.5], np.float32))
    _accumulate(diff, np.array([1.0], np.float32), np.array([1.0], np.float32))
    assert not diff.ok and diff.max_abs == 0.5


def test_atol_reaches_the_report(make_model):
    report = onnxopt.verify(_with_weight(make_model, 1.0), _with_weight(make_model, 1.001),
                            rtol=0.0, atol=0.01)
    assert report.ok and report.to_json()["outputs"][0]["atol"] == 0.01
    assert not onnxopt.verify(_with_weight(make_model, 1.0), _with_weight(make_model, 1.001),
                              rtol=0.0, atol=1e-4).ok


def test_different_outputs_are_refused(make_model):
    other = make_model(ADD_W.replace("y", "z"))
    with pytest.raises(ModelError, match=r"the models have different outputs: \['y'\] vs \['z'\]"):
        onnxopt.verify(make_model(ADD_W), other)


def test_inputs_respect_symbols_masks_and_tables(models_dir):
    proto = onnx.load(str(models_dir / "gpt2.ts.onnx"), load_external_data=False)
    feeds = make_inputs(proto, {"batch": 2, "other": 7}, seed=0)
    assert feeds["input_ids"].shape == feeds["attention_mask"].shape == (2, 7)
    assert feeds["input_ids"].dtype == np.int64
    assert feeds["input_ids"].min() >= 0 and feeds["input_ids"].max() < 1000  # vocab size
    mask = feeds["attention_mask"]
    assert mask[0, 0] == 1 and mask[0, -1] == 0  # right padding in the first row
    assert mask[1, 0] == 0 and mask[1, -1] == 1  # left padding in the second: its first
    # queries see no key under a causal mask, which kernels treat in different ways
    again = make_inputs(proto, {"batch": 2, "other": 7}, seed=0)
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)


def test_padding_mask_rows():
    mask = padding_mask((3, 9))
    assert mask.tolist()[0] == [1] * 7 + [0] * 2
    assert all(row[0] == 1 and row[-1] == 0 for row in mask.tolist())
    assert padding_mask((4, 2)).all()


POSITION_TABLE = """
agraph (float[batch, seq] x) => (float[batch, seq, 4] y)
    <float[128, 4] table = {RANDOM}, int64 zero = {0}, int64 one = {1}, int64[1] last = {2}> {
  n = Shape <start=1, end=2> (x)
  count = Squeeze (n)
  positions = Range (zero, count, one)
  embedded = Gather (table, positions)
  column = Unsqueeze (x, last)
  y = Add (column, embedded)
}
"""


def _switching(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with its first node marked as emitted by a kernel that switches with length."""
    from onnxopt.select.bind import kernel_metadata
    from onnxopt.select.causal_blocks import causal_block_kernels

    (kernel,) = causal_block_kernels()
    for key, value in kernel_metadata(kernel).items():
        proto.graph.node[0].metadata_props.add(key=key, value=value)
    return proto


def test_long_run_happens_where_the_optimized_model_switches_with_length(make_model):
    from onnxopt.verification import inputs

    report = onnxopt.verify(make_model(ADD_W), _switching(make_model(ADD_W)), runs=1,
                            long_sequence=1000)
    assert [r["x"] for r in report.runs] == [(1, 7), (2, 1000)]
    assert [r["x"] for r in onnxopt.verify(make_model(ADD_W), _switching(make_model(ADD_W)),
                                           runs=1).runs] == [(1, 7), (2, 300)]
    report = onnxopt.verify(make_model(ADD_W), _switching(make_model(ADD_W)), runs=1,
                            long_sequence=None)
    assert [r["x"] for r in report.runs] == [(1, 7)] and report.long_run_skipped is None
    assert inputs.LONG_SEQUENCE > 256  # past the causal blocks' switch (select.causal_blocks)


def test_long_run_is_skipped_with_a_reason(make_model):
    """A position table of 128 rows fails at 300 in the original: the run is skipped, said."""
    text = POSITION_TABLE.replace("{RANDOM}", "{" + ", ".join(["0.5"] * 512) + "}")
    report = onnxopt.verify(make_model(text), _switching(make_model(text)), runs=1)
    assert report.ok and len(report.runs) == 1
    assert report.long_run_skipped.startswith("the original does not run at sequence 300: ")
    fixed = ADD_W.replace("[batch, seq]", "[2, 300]")
    report = onnxopt.verify(make_model(fixed), _switching(make_model(fixed)), runs=1)
    assert report.long_run_skipped == "the model has no sequence dimension"


def test_an_optimized_model_that_fails_where_the_original_runs_is_a_mismatch(make_model):
    original = make_model("g (float[N, 4] x) => (float[N, 4] y) { y = Identity (x) }")
    broken = make_model("""
    g (float[N, 4] x) => (float[N, 4] y) {
        t = Constant <value = int64[2] {3, 4}> ()
        y = Reshape (x, t)
    }""")
    report = onnxopt.verify(original, broken, runs=3)
    assert not report.ok
    assert report.fails.startswith("the optimized model fails on x[")
    assert "where the original runs:" in report.fails
