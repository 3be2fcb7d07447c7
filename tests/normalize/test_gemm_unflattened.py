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


# The same layer with constant targets, its parts given per test (what is not the plain form).
FIXED = """
g (float{x} x{extra_input}) => (float{y} y{extra_output}) {{
    flat_shape = Constant <value = int64[2] {{-1, 8}}> ()
    w = Constant <value = float[8, 6] {{{w}}}> ()
    flat = Reshape (x, flat_shape)
    mm = Gemm ({gemm_inputs})
    target = Constant <value = int64[3] {{{target}}}> ()
    y = Reshape (mm, target){extra_node}
}}
"""


def _fixed(x="[2, 3, 8]", y="[2, 3, 6]", target="2, 3, 6", gemm_inputs="flat, w",
           extra_input="", extra_output="", extra_node="") -> str:
    return FIXED.format(x=x, y=y, target=target, gemm_inputs=gemm_inputs, w=W,
                        extra_input=extra_input, extra_output=extra_output,
                        extra_node=extra_node)


def _left_alone(check, text: str) -> None:
    result = check(text, _unflattened)
    assert result.changes == 0 and "Gemm" in result.ops


def test_constant_targets_are_the_same_layer(check):
    # The plain form of the cases below: each of them differs from it in one thing.
    assert check(_fixed(), _unflattened).changes == 1
    assert check(_fixed(extra_input=", float[6] c", gemm_inputs="flat, w, c"),
                 _unflattened).changes == 1


def test_a_bias_per_row_is_left_alone(check):
    # [1] broadcasts like a scalar: still a bias on every element.
    assert check(_conv1d(bias_shape="[1]", b="0.5"), _unflattened).changes == 1
    # [M, 1] adds one value per row: not a bias along the last axis.
    _left_alone(check, _fixed(extra_input=", float[6, 1] c", gemm_inputs="flat, w, c"))


def test_a_flatten_that_does_not_keep_the_last_axis_is_left_alone(check):
    _left_alone(check, _fixed(x="[2, 4, 4]", y="[2, 2, 6]", target="2, 2, 6"))


def test_a_result_split_other_than_by_x_rows_is_left_alone(check):
    _left_alone(check, _fixed(y="[3, 2, 6]", target="3, 2, 6"))


def test_a_gemm_result_read_twice_is_left_alone(check):
    _left_alone(check, _fixed(extra_output=", float[6, 6] z",
                              extra_node="\n    z = Identity (mm)"))


def test_gpt2_torchscript_keeps_no_flattened_gemm():
    model = import_model(os.path.join(MODELS, "gpt2.ts.onnx"))
    normalize.run(model, OptimizeOptions())
    ops = [n.op_type for n in model.graph]
    assert "Gemm" not in ops
    assert ops.count("MatMul") >= 8  # four linear layers per block, two blocks
