"""layer_norm: decomposed LayerNorms (every ending normalization leaves) and the ONNX op fuse,
with their residual; each refusal names what is wrong."""

from __future__ import annotations

import pytest

from onnxopt.rules.layer_norm import (
    LayerNorm,
    LayerNormOp,
)

RULES = [LayerNormOp(), LayerNorm()]
WEIGHTS = ("float[8] gamma = {0.5, 1.5, 2, 1, 1, 1, 1, 3}, "
           "float[8] beta = {0.1, 0, 0, 0, 0, 0, 0, 0.2}, float eps = {0.00001}, float two = {2.0}")


def decomposed(*, mean_axes="[-1]", var_axes="[-1]", square="sq = Pow (d, two)",
               scale="n = Div (d, std)", tail="s = Mul (n, gamma)\n y = Add (s, beta)",
               eps="eps", x="float[batch, 3, 8] x", extra_in="", outputs="float[batch, 3, 8] y",
               extra="", weights=WEIGHTS) -> str:
    return f"""
g ({x}{extra_in}) => ({outputs}) <{weights}> {{
    mean = ReduceMean <axes = {mean_axes}> (x)
    d = Sub (x, mean)
    {square}
    var = ReduceMean <axes = {var_axes}> (sq)
    ve = Add (var, {eps})
    std = Sqrt (ve)
    {scale}
    {tail}
    {extra}
}}
"""


def _one(fused, op="LayerNormFused"):
    (node,) = fused.nodes(op)
    return node


def test_decomposed_layer_norm_fuses_and_computes_the_same(fuse_text, optimize_text):
    fused = fuse_text(decomposed(), RULES, opset=17)
    node = _one(fused)
    assert [v.name for v in node.inputs] == ["x", "gamma", "beta"]
    assert node.attr("epsilon") == pytest.approx(1e-5) and node.attr("axis") == -1
    assert node.created_by == "layer_norm"
    assert set(fused.ops) == {"LayerNormFused"}
    for opset in (17, 18):  # opset 18 spells ReduceMean's axes as an input
        text = decomposed() if opset == 17 else decomposed().replace(
            "ReduceMean <axes = [-1]> (x)", "ReduceMean (x, axes)").replace(
            "ReduceMean <axes = [-1]> (sq)", "ReduceMean (sq, axes)").replace(
            "two = {2.0}", "two = {2.0}, int64[1] axes = {-1}")
        result, report = optimize_text(text, opset=opset)
        assert result.report.stages["fuse"].count("layer_norm") == 1
        assert report.ok, report.to_json()


@pytest.mark.parametrize("square, scale", [
    ("sq = Mul (d, d)", "n = Div (d, std)"),
    ("sq = Pow (d, two)", "r = Reciprocal (std)\n n = Mul (d, r)"),
])
def test_square_and_division_spellings(fuse_text, square, scale):
    fused = fuse_text(decomposed(square=square, scale=scale), RULES, opset=17)
    assert set(fused.ops) == {"LayerNormFused"}


@pytest.mark.parametrize("tail, gamma, beta", [
    ("y = Add (n, beta)", False, True),
    ("y = Mul (n, gamma)", True, False),
    ("y = Identity (n)", False, False),
])
def test_norm_without_weight_or_bias_ends_early(fuse_text, optimize_text, tail, gamma, beta):
    """Normalization removes an all-ones gamma or all-zeros beta: the norm ends at Add/Mul/Div."""
    fused = fuse_text(decomposed(tail=tail), RULES, opset=17)
    node = _one(fused)
    assert (node.input(1) is not None, node.input(2) is not None) == (gamma, beta)
    assert fused.report.count("layer_norm") == 1
    _result, report = optimize_text(decomposed(tail=tail), opset=17)
    assert report.ok, report.to_json()


def test_weight_after_reciprocal_form_is_one_fusion(fuse_text):
    """The bare ``d * 1/std`` is a Mul too; it waits for the weight and bias that follow."""
    fused = fuse_text(decomposed(scale="r = Reciprocal (std)\n n = Mul (d, r)"), RULES, opset=17)
    assert fused.report.count("layer_norm") == 1
    assert [r.status for r in fused.report.regions if r.rule == "layer_norm"] == ["fused"]


def test_float16_norm_computed_in_float32_keeps_its_casts(fuse_text, optimize_text):
    text = decomposed(
        x="float16[batch, 3, 8] x0", outputs="float16[batch, 3, 8] y",
        tail="h = Cast <to = 10> (n)\n g16 = Cast <to = 10> (gamma)\n b16 = Cast <to = 10> (beta)"
             "\n s = Mul (h, g16)\n y = Add (s, b16)",
    ).replace("{\n", "{\n    x = Cast <to = 1> (x0)\n", 1)
    fused = fuse_text(text, RULES, opset=17)
    node = _one(fused)
    assert node.attr("compute_dtype") == "float32" and node.inputs[0].name == "x0"
    assert node.outputs[0].dtype == "float16"
    for opset, ops in ((17, {"LayerNormalization": 1}), (16, {"Cast": 2, "ReduceMean": 2})):
        result, report = optimize_text(text, opset=opset)
        assert report.ok, report.to_json()
        assert {op: result.report.nodes_after[op] for op in ops} == ops


RESIDUAL_LN = """
g (float[batch, seq, 8] a, float[batch, seq, 8] b, float[8] gamma, float[8] beta)
    => (float[batch, seq, 8] y, float[batch, seq, 8] z) {
    h = Add (a, b)
    y = LayerNormalization <axis = -1, epsilon = 0.00001> (h, gamma, beta)
    z = Mul (h, y)
}
"""


def test_native_layer_norm_folds_its_residual_and_outputs_the_sum(fuse_text, optimize_text):
    fused = fuse_text(RESIDUAL_LN, RULES)
    node = _one(fused)
    assert [v.name for v in node.inputs] == ["a", "gamma", "beta", "b"]
    assert node.attr("has_residual") == 1 and len(node.outputs) == 2
    (mul,) = fused.nodes("Mul")
    assert mul.inputs[0] is node.outputs[1] and mul.inputs[1] is node.outputs[0]
    assert "Add" not in fused.ops
    _result, report = optimize_text(RESIDUAL_LN)
    assert report.ok, report.to_json()


def test_residual_sum_that_is_a_graph_output_and_read_before_the_norm(fuse_text, optimize_text):
    text = """
g (float[batch, seq, 8] a, float[batch, seq, 8] b, float[8] gamma)
    => (float[batch, seq, 8] h, float[batch, seq, 8] y, int64[3] n) {
    h = Add (a, b)
    n = Shape (h)
    y = LayerNormalization <axis = -1, epsilon = 0.00001> (h, gamma)
}
"""
    fused = fuse_text(text, RULES)
    node = _one(fused)
    assert len(node.outputs) == 2 and node.outputs[1].name == "h"
    assert [v.name for v in fused.model.graph.outputs] == ["h", "y", "n"]
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


def test_residual_read_only_by_the_norm_is_folded_without_a_sum(fuse_text):
    fused = fuse_text(RESIDUAL_LN.replace("z = Mul (h, y)", "z = Mul (y, y)"), RULES)
    node = _one(fused)
    assert node.attr("has_residual") == 1 and len(node.outputs) == 1
    assert "Add" not in fused.ops


def test_residual_with_a_broadcast_operand_is_not_folded(fuse_text):
    text = RESIDUAL_LN.replace("float[batch, seq, 8] b", "float[1, seq, 8] b")
    node = _one(fuse_text(text, RULES))
    assert node.attr("has_residual", 0) == 0 and node.inputs[0].name == "h"


# --- refusals ---------------------------------------------------------------------------------

def _refusal(fused, code: str) -> str:
    """The one refusal's sentence, once its code is ``code``."""
    (reason,) = fused.reasons("layer_norm")
    assert fused.codes("layer_norm") == [code]
    assert not fused.nodes("LayerNormFused")
    return reason


def test_mean_and_variance_over_different_axes(fuse_text):
    fused = fuse_text(decomposed(mean_axes="[1]", var_axes="[2]"), RULES, opset=17)
    assert _refusal(fused, "axes_differ") == (
        "ReduceMean_1: the mean is over axis [1], the variance over axis [2]")


def test_not_the_last_axis(fuse_text):
    text = decomposed(mean_axes="[1]", var_axes="[1]", tail="y = Identity (n)")
    assert _refusal(fuse_text(text, RULES, opset=17), "not_last_axis") == (
        "ReduceMean: the mean runs over axis [1], not the last axis (2)")


def test_epsilon_computed_at_run_time(fuse_text):
    text = decomposed(eps="e", extra_in=", float e")
    assert _refusal(fuse_text(text, RULES, opset=17), "not_a_constant") == (
        "%e: the epsilon is computed at run time, not a constant")


def test_epsilon_not_a_scalar(fuse_text):
    text = decomposed(weights=WEIGHTS.replace("float eps = {0.00001}",
                                              "float[1, 3, 1] eps = {0.00001, 0.00002, 0.00001}"))
    assert _refusal(fuse_text(text, RULES, opset=17), "not_a_scalar") == (
        "%eps: the epsilon is not a scalar (shape [1, 3, 1])")


def test_weight_per_row_is_left_outside_the_norm(fuse_text):
    """A [3, 1] "weight" is not one number per feature: the norm fuses without it."""
    text = decomposed(weights=WEIGHTS.replace("float[8] gamma = {0.5, 1.5, 2, 1, 1, 1, 1, 3}",
                                              "float[3, 1] gamma = {0.5, 1.5, 2}"))
    fused = fuse_text(text, RULES, opset=17)
    node = _one(fused)
    assert node.input(1) is None and node.input(2) is None
    assert fused.ops == {"LayerNormFused": 1, "Mul": 1, "Add": 1}


NATIVE = """
g (float[batch, seq, 8] x, float[{g}] gamma, float[{b}] beta) => (float[batch, seq, 8] y) {{
    y = LayerNormalization <axis = -1, epsilon = 0.00001> (x, gamma, beta)
}}
"""


@pytest.mark.parametrize("g, b, reason", [
    ("seq, 8", "8", "%gamma: the scale (gamma) has shape ['seq', 8], not [8]"),
    ("1, 8", "2, 8", "%beta: the bias (beta) has shape [2, 8], not [8]"),
])
def test_weights_not_one_per_feature(fuse_text, g, b, reason):
    assert _refusal(fuse_text(NATIVE.format(g=g, b=b), RULES), "not_per_feature") == reason


def test_intermediate_used_outside(fuse_text):
    text = decomposed(outputs="float[batch, 3, 8] y, float[batch, 3, 8] z", extra="z = Abs (d)")
    assert _refusal(fuse_text(text, RULES, opset=17), "used_outside_match") == (
        "%d is also used by Abs (Abs) outside the match")


def test_native_layer_norm_over_more_than_the_last_axis(fuse_text):
    text = RESIDUAL_LN.replace("axis = -1", "axis = 1").replace(
        "float[8] gamma", "float[seq, 8] gamma").replace("float[8] beta", "float[seq, 8] beta")
    assert _refusal(fuse_text(text, RULES), "not_last_axis") == (
        "LayerNormalization: normalizes over axes 1..2, not the last axis (2) alone")


def test_native_layer_norm_whose_mean_output_is_read(fuse_text):
    text = """
g (float[batch, seq, 8] x, float[8] gamma) => (float[batch, seq, 8] y, float[batch, seq, 1] m) {
    y, m = LayerNormalization <axis = -1, epsilon = 0.00001> (x, gamma)
}
"""
    assert _refusal(fuse_text(text, RULES), "statistics_read") == (
        "LayerNormalization: its Mean/InvStdDev outputs are read, which the fused op does not give")
