"""A linear layer flattened around a Gemm becomes a MatMul (and Add) on the tensor as it was."""

from __future__ import annotations

import os

from onnxopt import normalize
from onnxopt.importer import import_model
from onnxopt.normalize.gemm_unflattened import gemm_unflattened
from onnxopt.normalize.shapes import infer_shapes
from onnxopt.options import OptimizeOptions

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "models")


def _unflattened(model):
    infer_shapes(model)
    return gemm_unflattened(model)


# GPT-2's Conv1D as TorchScript writes it: rows merged by a constant target, the result's
# shape rebuilt from x's shape at run time.
CONV1D = """
g (float[B, S, 8] x) => (float[B, S, 6] y) {{
    flat_shape = Constant <value = int64[2] {{-1, 8}}> ()
    w = Constant <value = float[8, 6] {{{w}}}> ()
    b = Constant <value = float{bias_shape} {{{b}}}> ()
    flat = Reshape (x, flat_shape)
    mm = Gemm {attrs} (flat, w, b)
    sx = Shape (x)
    lead = Slice (sx, start, stop)
    start = Constant <value = int64[1] {{0}}> ()
    stop = Constant <value = int64[1] {{-1}}> ()
    n = Constant <value = int64[1] {{6}}> ()
    target = Concat <axis = 0> (lead, n)
    y = Reshape (mm, target)
}}
"""
W = ", ".join(str((i * 7 % 11) / 10 - 0.5) for i in range(48))
B6 = "0.1, -0.2, 0.3, -0.4, 0.5, -0.6"


def _conv1d(attrs: str = "", bias_shape: str = "[6]", b: str = B6) -> str:
    text = CONV1D.format(w=W, bias_shape=bias_shape, b=b, attrs=attrs)
    # ONNX text needs a node's inputs defined before it: put the Slice bounds first.
    lines = text.splitlines()
    bounds = [line for line in lines if "start = Constant" in line or "stop = Constant" in line]
    rest = [line for line in lines if line not in bounds]
    at = next(i for i, line in enumerate(rest) if "flat_shape = Constant" in line)
    return "\n".join(rest[:at] + bounds + rest[at:])


def test_conv1d_becomes_matmul_and_add(check):
    result = check(_conv1d(), _unflattened)
    assert result.changes == 1
    live = [op for op in result.ops if op in ("MatMul", "Add", "Gemm", "Reshape")]
    assert live == ["MatMul", "Add"]
    assert result.node("MatMul").inputs[0].name == "x"


def test_a_scalar_like_bias_of_one_row_broadcasts_the_same(check):
    result = check(_conv1d(bias_shape="[1, 6]"), _unflattened)
    assert result.changes == 1


def test_no_bias_is_a_matmul_alone(check):
    text = _conv1d().replace("mm = Gemm  (flat, w, b)", "mm = Gemm  (flat, w)")
    result = check(text, _unflattened)
    assert result.changes == 1
    assert "Gemm" not in result.ops and "Add" not in result.ops


def test_a_transposed_weight_is_left_alone(check):
    text = _conv1d(attrs="<transB = 1>").replace("float[8, 6] {", "float[6, 8] {")
    result = check(text, _unflattened)
    assert result.changes == 0 and "Gemm" in result.ops


def test_a_scaled_product_is_left_alone(check):
    result = check(_conv1d(attrs="<alpha = 0.5>"), _unflattened)
    assert result.changes == 0 and "Gemm" in result.ops


def test_a_bias_per_row_is_left_alone(check):
    # [M, 1]-shaped C adds one value per row: not a bias along the last axis.
    text = _conv1d(bias_shape="[1]", b="0.5")
    result = check(text, _unflattened)
    assert result.changes == 1  # [1] broadcasts like a scalar: still a bias on every element
    text = """
    g (float[2, 3, 8] x, float[6, 1] c) => (float[2, 3, 6] y) {
        flat_shape = Constant <value = int64[2] {-1, 8}> ()
        w = Constant <value = float[8, 6] {WEIGHTS}> ()
        flat = Reshape (x, flat_shape)
        mm = Gemm (flat, w, c)
        target = Constant <value = int64[3] {2, 3, 6}> ()
        y = Reshape (mm, target)
    }
    """.replace("WEIGHTS", W)
    result = check(text, _unflattened)
    assert result.changes == 0 and "Gemm" in result.ops


def test_a_flatten_that_does_not_keep_the_last_axis_is_left_alone(check):
    text = """
    g (float[2, 4, 4] x) => (float[2, 4, 6] y) {
        flat_shape = Constant <value = int64[2] {-1, 8}> ()
        w = Constant <value = float[8, 6] {WEIGHTS}> ()
        flat = Reshape (x, flat_shape)
        mm = Gemm (flat, w)
        target = Constant <value = int64[3] {2, 2, 6}> ()
        y = Reshape (mm, target)
    }
    """.replace("WEIGHTS", W)
    text = text.replace("float[2, 4, 6] y", "float[2, 2, 6] y")
    result = check(text, _unflattened)
    assert result.changes == 0 and "Gemm" in result.ops


def test_a_result_split_other_than_by_x_rows_is_left_alone(check):
    text = """
    g (float[2, 3, 8] x) => (float[3, 2, 6] y) {
        flat_shape = Constant <value = int64[2] {-1, 8}> ()
        w = Constant <value = float[8, 6] {WEIGHTS}> ()
        flat = Reshape (x, flat_shape)
        mm = Gemm (flat, w)
        target = Constant <value = int64[3] {3, 2, 6}> ()
        y = Reshape (mm, target)
    }
    """.replace("WEIGHTS", W)
    result = check(text, _unflattened)
    assert result.changes == 0 and "Gemm" in result.ops


def test_a_gemm_result_read_twice_is_left_alone(check):
    text = """
    g (float[2, 3, 8] x) => (float[2, 3, 6] y, float[6, 6] z) {
        flat_shape = Constant <value = int64[2] {-1, 8}> ()
        w = Constant <value = float[8, 6] {WEIGHTS}> ()
        flat = Reshape (x, flat_shape)
        mm = Gemm (flat, w)
        target = Constant <value = int64[3] {2, 3, 6}> ()
        y = Reshape (mm, target)
        z = Identity (mm)
    }
    """.replace("WEIGHTS", W)
    result = check(text, _unflattened)
    assert result.changes == 0 and "Gemm" in result.ops


def test_gpt2_torchscript_keeps_no_flattened_gemm():
    model = import_model(os.path.join(MODELS, "gpt2.ts.onnx"))
    normalize.run(model, OptimizeOptions())
    ops = [n.op_type for n in model.graph]
    assert "Gemm" not in ops
    assert ops.count("MatMul") >= 8  # four linear layers per block, two blocks
