"""gelu: the exact (erf) GELU wherever its 0.5 sits, GPT-2's tanh approximation, a folded bias;
constants that are not GELU's are named in the partial-match reason."""

from __future__ import annotations

import pytest

from onnxopt.rules.gelu import Gelu

CONSTS = ("float half = {0.5}, float one = {1.0}, float sqrt2 = {1.4142135}, "
          "float k = {0.7978845608}, float c = {0.044715}, float three = {3.0}, "
          "float[8] bias = {0.1, -0.2, 0.3, 0, 0.5, 0.6, -0.7, 0.8}")


def graph(body: str, *, outputs="float[batch, seq, 8] y", extra_in="") -> str:
    return f"""
g (float[batch, seq, 8] x{extra_in}) => ({outputs}) <{CONSTS}> {{
    {body}
}}
"""


ERF = "s = Div (x, sqrt2)\n e = Erf (s)\n a = Add (e, one)\n"
ERF_FORMS = {
    "torchscript": ERF + "m = Mul (x, a)\n y = Mul (m, half)",       # (x·(1+erf))·0.5
    "dynamo": ERF + "h = Mul (half, a)\n y = Mul (x, h)",              # x·(0.5·(1+erf))
    "half_first": ERF + "h = Mul (x, half)\n y = Mul (h, a)",          # (x·0.5)·(1+erf)
}
TANH = ("h = Mul (x, half)\n p = Pow (x, three)\n pc = Mul (p, c)\n u = Add (x, pc)\n"
        " v = Mul (u, k)\n t = Tanh (v)\n a = Add (t, one)\n y = Mul (h, a)")


def _one(fused):
    (node,) = fused.nodes("GeluFused")
    return node


@pytest.mark.parametrize("form", sorted(ERF_FORMS))
def test_erf_gelu_fuses_wherever_the_half_sits(fuse_text, optimize_text, form):
    fused = fuse_text(graph(ERF_FORMS[form]), [Gelu()])
    node = _one(fused)
    assert node.attr("approximate") == "none" and [v.name for v in node.inputs] == ["x"]
    assert set(fused.ops) == {"GeluFused"}
    _result, report = optimize_text(graph(ERF_FORMS[form]))
    assert report.ok, report.to_json()


TANH_FORMS = {
    "pow": TANH,
    # PyTorch's gelu(approximate="tanh") under the TorchScript exporter (Gemma, StarCoder2)
    "x_times_square": TANH.replace("p = Pow (x, three)", "sq = Mul (x, x)\n p = Mul (x, sq)"),
    "square_times_x": TANH.replace("p = Pow (x, three)", "sq = Mul (x, x)\n p = Mul (sq, x)"),
    # BLOOM: √(2/π)·x·(1 + 0.044715·x·x)
    "factored": ("h = Mul (x, half)\n xk = Mul (x, k)\n xc = Mul (x, c)\n sq = Mul (xc, x)\n"
                 " u = Add (sq, one)\n v = Mul (xk, u)\n t = Tanh (v)\n a = Add (t, one)\n"
                 " y = Mul (h, a)"),
}


@pytest.mark.parametrize("form", sorted(TANH_FORMS))
def test_tanh_gelu_fuses(fuse_text, optimize_text, form):
    node = _one(fuse_text(graph(TANH_FORMS[form]), [Gelu()]))
    assert node.attr("approximate") == "tanh"
    _result, report = optimize_text(graph(TANH_FORMS[form]))
    assert report.ok, report.to_json()


@pytest.mark.parametrize("body", [ERF_FORMS["dynamo"], TANH])
def test_bias_before_the_activation_is_folded(fuse_text, optimize_text, body):
    text = graph("xb = Add (x, bias)\n" + body.replace("(x", "(xb").replace("x)", "xb)")
                 .replace("x,", "xb,"))
    fused = fuse_text(text, [Gelu()])
    assert [v.name for v in _one(fused).inputs] == ["x", "bias"]
    assert set(fused.ops) == {"GeluFused"}
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


def test_bias_read_elsewhere_stays_outside(fuse_text):
    body = "xb = Add (x, bias)\n" + ERF_FORMS["dynamo"].replace("(x", "(xb").replace("x,", "xb,")
    text = graph(body + "\n z = Abs (xb)", outputs="float[batch, seq, 8] y, float[batch, seq, 8] z")
    fused = fuse_text(text, [Gelu()])
    assert [v.name for v in _one(fused).inputs] == ["xb"]
    assert fused.ops == {"Add": 1, "GeluFused": 1, "Abs": 1}


def test_bias_per_row_stays_outside(fuse_text):
    body = "xb = Add (x, b2)\n" + ERF_FORMS["dynamo"].replace("(x", "(xb").replace("x,", "xb,")
    text = graph(body).replace("float[batch, seq, 8] x", "float[batch, 2, 8] x").replace(
        "float[batch, seq, 8] y", "float[batch, 2, 8] y").replace(
        "float three = {3.0}", "float three = {3.0}, float[2, 1] b2 = {1, 2}")
    fused = fuse_text(text, [Gelu()])
    assert [v.name for v in _one(fused).inputs] == ["xb"]
    assert fused.ops == {"Add": 1, "GeluFused": 1}


def test_wrong_constant_is_named(fuse_text):
    text = graph(ERF_FORMS["dynamo"].replace("s = Div (x, sqrt2)", "s = Mul (x, c6)")).replace(
        "float three = {3.0}", "float three = {3.0}, float c6 = {0.6}")
    fused = fuse_text(text, [Gelu()])
    assert not fused.nodes("GeluFused")
    assert "constant %c6 is 0.6, expected 0.707107" in fused.reasons("gelu", "partial")
    assert "constant_value" in fused.codes("gelu", "partial")


def test_relu_like_curve_is_not_gelu(fuse_text):
    text = graph("r = Relu (x)\n a = Add (r, one)\n h = Mul (half, a)\n y = Mul (x, h)")
    assert not fuse_text(text, [Gelu()]).nodes("GeluFused")


def test_no_partial_match_is_left_inside_a_fused_gelu(make_model):
    """BLOOM's GELU has an Add the layer-norm pattern starts from and follows 3 nodes deep;
    once the GELU fused that Add, the partial match says nothing and is not reported."""
    from onnxopt import normalize
    from onnxopt.importer import import_model
    from onnxopt.legality.target import run_target
    from onnxopt.options import OptimizeOptions
    from onnxopt.pipeline import fuse_and_settle

    text = graph("m = MatMul (x, w)\n h = Mul (m, half)\n mk = Mul (m, k)\n mc = Mul (m, c)\n"
                 " sq = Mul (mc, m)\n u = Add (sq, one)\n v = Mul (mk, u)\n t = Tanh (v)\n"
                 " a = Add (t, one)\n y = Mul (h, a)", extra_in=", float[8, 8] w")
    model = import_model(make_model(text))
    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    report = fuse_and_settle(model, options, run_target(options, model.opset))
    assert report.count("gelu") == 1
    assert [r for r in report.regions if r.status == "partial"] == []


def test_gelu_whose_half_was_moved_past_a_transpose(fuse_text, optimize_text):
    """A conv's GELU, then its channels moved last (wav2vec2's TorchScript export): the 0.5 is
    moved past the Transpose by normalization; the fused op is followed by the Transpose."""
    body = ERF + "m = Mul (x, a)\n t = Transpose <perm = [0, 2, 1]> (m)\n y = Mul (t, half)"
    text = graph(body, outputs="float[batch, 8, seq] y")
    fused = fuse_text(text, [Gelu()])
    node = _one(fused)
    assert [v.name for v in node.inputs] == ["x"]
    assert sorted(fused.ops) == ["GeluFused", "Transpose"]
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()
