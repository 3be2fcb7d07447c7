"""silu and swiglu: x·sigmoid(x), then silu(gate)·up — also when SiLU is not fused first."""

from __future__ import annotations

from onnxopt.rules.silu import Silu
from onnxopt.rules.swiglu import SwiGLU

MLP = """
g (float[batch, seq, 8] h, float[8, 16] wg, float[8, 16] wu) => (float[batch, seq, 16] y) {
    gate = MatMul (h, wg)
    up = MatMul (h, wu)
    s = Sigmoid (gate)
    act = Mul (gate, s)
    y = Mul (act, up)
}
"""


def test_silu_fuses(fuse_text, optimize_text):
    text = "g (float[batch, 16] x) => (float[batch, 16] y) {\n s = Sigmoid (x)\n y = Mul (s, x)\n}"
    fused = fuse_text(text, [Silu()])
    (node,) = fused.nodes("SiluFused")
    assert node.inputs[0].name == "x" and set(fused.ops) == {"SiluFused"}
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


def test_sigmoid_of_another_value_is_not_silu(fuse_text):
    text = ("g (float[batch, 16] x, float[batch, 16] z) => (float[batch, 16] y) "
            "{\n s = Sigmoid (z)\n y = Mul (x, s)\n}")
    fused = fuse_text(text, [Silu()])
    assert not fused.nodes("SiluFused") and fused.ops == {"Sigmoid": 1, "Mul": 1}


def test_swiglu_after_silu(fuse_text, optimize_text):
    fused = fuse_text(MLP, [Silu(), SwiGLU()])
    (node,) = fused.nodes("SwiGLUFused")
    assert [v.name for v in node.inputs] == ["gate", "up"]
    assert fused.ops == {"MatMul": 2, "SwiGLUFused": 1}
    assert fused.report.summary()["swiglu"]["fused"] == 1
    assert [r.detail for r in fused.report.regions if r.status == "fused"] == [
        "x·sigmoid(x)", "after SiluFused"]
    _result, report = optimize_text(MLP)
    assert report.ok, report.to_json()


def test_swiglu_without_the_silu_rule(fuse_text):
    fused = fuse_text(MLP, [SwiGLU()])
    (_node,) = fused.nodes("SwiGLUFused")
    assert fused.ops == {"MatMul": 2, "SwiGLUFused": 1}
    assert fused.report.regions[-1].detail == "raw x·sigmoid(x)"


def test_up_of_another_shape(fuse_text):
    text = MLP.replace("float[8, 16] wu", "float[8, 1] wu")
    fused = fuse_text(text, [Silu(), SwiGLU()])
    assert fused.reasons("swiglu") == [(
        "%up: up has shape ['batch', 'seq', 1], gate ['batch', 'seq', 16]; "
        "SwiGLU needs equal shapes")]
    assert fused.codes("swiglu") == ["shapes_differ"]
    assert fused.nodes("SiluFused") and not fused.nodes("SwiGLUFused")


def test_silu_times_a_constant_is_not_swiglu(fuse_text):
    text = MLP.replace(", float[8, 16] wu)", ")").replace("up = MatMul (h, wu)", "").replace(
        "{\n", "<float[16] up = {" + ", ".join(["0.5"] * 16) + "}> {\n", 1)
    fused = fuse_text(text, [Silu(), SwiGLU()])
    assert fused.reasons("swiglu") == [
        "%up: the up projection is a constant, so this is SiLU times a weight"]
    assert fused.codes("swiglu") == ["up_is_constant"]
