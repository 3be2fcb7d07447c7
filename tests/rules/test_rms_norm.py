"""rms_norm: LLaMA/Mistral/T5 RMSNorms in both exporters' spellings, float16 models computing in
float32, and the residual; each refusal names what is wrong."""

from __future__ import annotations

import pytest

from onnxopt.rules.rms_norm import RMSNorm

RULES = [RMSNorm()]
CONSTS = ("float[8] gamma = {0.5, 1.5, 2, 1, 1, 1, 1, 3}, float eps = {0.000001}, "
          "float two = {2.0}, float one = {1.0}, int64[1] axes = {-1}")


def rms(*, x="float[batch, seq, 8] x", outputs="float[batch, seq, 8] y", square="Pow (xc, two)",
        mean="ReduceMean (sq, axes)", eps="eps", scale="r = Reciprocal (std)\n n = Mul (xc, r)",
        head="xc = Identity (x)", tail="y = Mul (n, gamma)", extra_in="", extra="") -> str:
    return f"""
g ({x}{extra_in}) => ({outputs}) <{CONSTS}> {{
    {head}
    sq = {square}
    ms = {mean}
    ve = Add (ms, {eps})
    std = Sqrt (ve)
    {scale}
    {tail}
    {extra}
}}
"""


TORCHSCRIPT = {"mean": "ReduceMean <axes = [-1]> (sq)",
               "scale": "r = Div (one, std)\n n = Mul (xc, r)"}


def _one(fused):
    (node,) = fused.nodes("RMSNormFused")
    return node


@pytest.mark.parametrize("opset, spelling", [
    (18, {}),                                   # dynamo: Reciprocal
    (17, TORCHSCRIPT),                          # TorchScript: Div(1, sqrt), axes attribute
    (18, {"square": "Mul (xc, xc)"}),
    (18, {"scale": "n = Div (xc, std)"}),
])
def test_rms_norm_spellings_fuse_and_compute_the_same(fuse_text, optimize_text, opset, spelling):
    text = rms(**spelling)
    fused = fuse_text(text, RULES, opset=opset)
    node = _one(fused)
    assert [v.name for v in node.inputs] == ["x", "gamma"]
    assert node.attr("epsilon") == pytest.approx(1e-6) and node.created_by == "rms_norm"
    assert set(fused.ops) == {"RMSNormFused"}
    result, report = optimize_text(text, opset=opset)
    assert result.report.stages["fuse"].count("rms_norm") == 1
    assert report.ok, report.to_json()


@pytest.mark.parametrize("scale", ["r = Reciprocal (std)\n n = Mul (xc, r)", "n = Div (xc, std)"])
def test_all_ones_weight_removed_by_normalization(fuse_text, optimize_text, scale):
    text = rms(scale=scale, tail="y = Identity (n)")
    node = _one(fuse_text(text, RULES))
    assert node.inputs[1:] == ()
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


LLAMA_FP16 = {
    "x": "float16[batch, seq, 8] x", "outputs": "float16[batch, seq, 8] y",
    "head": "xc = Cast <to = 1> (x)",
    "tail": "h = Cast <to = 10> (n)\n g16 = Cast <to = 10> (gamma)\n y = Mul (h, g16)",
}


def test_float16_llama_norm_computes_in_float32(fuse_text, optimize_text):
    text = rms(**LLAMA_FP16)
    node = _one(fuse_text(text, RULES))
    assert node.attr("compute_dtype") == "float32"
    assert node.inputs[0].dtype == node.outputs[0].dtype == "float16"
    result, report = optimize_text(text)
    assert report.ok, report.to_json()
    assert result.report.nodes_after["Cast"] == 2


def test_float16_norm_without_weight_ends_at_the_cast_back(fuse_text, optimize_text):
    text = rms(**{**LLAMA_FP16, "tail": "y = Cast <to = 10> (n)"})
    fused = fuse_text(text, RULES)
    assert _one(fused).attr("compute_dtype") == "float32"
    assert fused.report.count("rms_norm") == 1 and not fused.reasons("rms_norm")
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


def test_t5_float16_input_with_float32_weight(fuse_text, optimize_text):
    """T5 casts only for the variance; x · rsqrt promotes x, the float32 weight keeps float32."""
    text = rms(x="float16[batch, seq, 8] x", outputs="float[batch, seq, 8] y",
               head="xc = Cast <to = 1> (x)")
    node = _one(fuse_text(text, RULES))
    assert (node.attr("compute_dtype"), node.outputs[0].dtype) == ("float32", "float32")
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


RESIDUAL = {"x": "float[batch, seq, 8] a", "extra_in": ", float[batch, seq, 8] b",
                "outputs": "float[batch, seq, 8] y, float[batch, seq, 8] z",
                "head": "xc = Add (a, b)", "extra": "z = Add (xc, y)"}


def test_residual_sum_read_by_the_next_block_becomes_the_second_output(fuse_text, optimize_text):
    fused = fuse_text(rms(**RESIDUAL), RULES)
    node = _one(fused)
    assert [v.name for v in node.inputs] == ["a", "gamma", "b"]
    assert node.attr("has_residual") == 1 and len(node.outputs) == 2
    (add,) = fused.nodes("Add")
    assert add.inputs == (node.outputs[1], node.outputs[0])
    _result, report = optimize_text(rms(**RESIDUAL))
    assert report.ok, report.to_json()


def test_residual_of_a_norm_without_weight(fuse_text, optimize_text):
    text = rms(**{**RESIDUAL, "tail": "y = Identity (n)"})
    node = _one(fuse_text(text, RULES))
    assert [v.name if v else None for v in node.inputs] == ["a", None, "b"]
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


def test_layer_norm_is_not_an_rms_norm_of_the_centered_value(fuse_text):
    text = rms(head="mu = ReduceMean (x, axes)\n xc = Sub (x, mu)")
    fused = fuse_text(text, RULES)
    assert not fused.nodes("RMSNormFused")
    assert ("ReduceMean_1: averages the squares of %xc = x - mean(x): a LayerNorm, not an RMSNorm"
            in fused.reasons("rms_norm", "partial"))
    assert "centered_squares" in fused.codes("rms_norm", "partial")


# --- refusals ---------------------------------------------------------------------------------

def _refusal(fused, code: str) -> str:
    """The one refusal's sentence, once its code is ``code``."""
    (reason,) = fused.reasons("rms_norm")
    assert fused.codes("rms_norm") == [code]
    assert not fused.nodes("RMSNormFused")
    return reason


def test_mean_not_over_the_last_axis(fuse_text):
    text = rms(mean="ReduceMean <axes = [1]> (sq)", x="float[batch, 8, 8] x",
               outputs="float[batch, 8, 8] y", tail="y = Identity (n)")
    assert _refusal(fuse_text(text, RULES, opset=17), "not_last_axis") == (
        "ReduceMean: the mean of squares runs over axis [1], not the last axis (2)")


def test_mean_that_drops_the_axis(fuse_text):
    text = rms(mean="ReduceMean <axes = [-1], keepdims = 0> (sq)", x="float[1, 8, 8] x",
               outputs="float[1, 8, 8] y", tail="y = Identity (n)")
    assert _refusal(fuse_text(text, RULES, opset=17), "keepdims_dropped") == (
        "ReduceMean: the reduced axis is dropped (keepdims=0), not an RMSNorm")


def test_epsilon_computed_at_run_time(fuse_text):
    text = rms(eps="e", extra_in=", float e")
    assert _refusal(fuse_text(text, RULES), "not_a_constant") == (
        "%e: the epsilon is computed at run time, not a constant")


def test_epsilon_not_a_scalar(fuse_text):
    text = rms(eps="e2", x="float[2, seq, 8] x", outputs="float[2, seq, 8] y").replace(
        "int64[1] axes = {-1}", "int64[1] axes = {-1}, float[2, 1, 1] e2 = {0.000001, 0.000002}")
    assert _refusal(fuse_text(text, RULES), "not_a_scalar") == (
        "%e2: the epsilon is not a scalar (shape [2, 1, 1])")


def test_intermediate_used_outside(fuse_text):
    text = rms(outputs="float[batch, seq, 8] y, float[batch, seq, 1] z", extra="z = Abs (std)")
    assert _refusal(fuse_text(text, RULES), "used_outside_match") == (
        "%std is also used by Abs (Abs) outside the match")
