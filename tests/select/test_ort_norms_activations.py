"""Norm and activation kernels: each emitter matches the decomposition in ONNX Runtime (CPU)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

RNG = np.random.default_rng(1)
H = 32


def x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def norm(op: str, *, residual: bool, sum_out: bool, gamma=True, beta=True, dtype="float"):
    weights = []
    inits = []
    if gamma:
        weights.append("g")
        inits.append(f"{dtype}[{H}] g = {{{', '.join(f'{1 + 0.01 * i:.2f}' for i in range(H))}}}")
    else:
        weights.append("")
    if op == "LayerNormFused":
        if beta:
            weights.append("bb")
            inits.append(f"{dtype}[{H}] bb = {{{', '.join(f'{0.1 * i:.1f}' for i in range(H))}}}")
        else:
            weights.append("")
    args = ", ".join(["x", *weights] + (["r"] if residual else []))
    outs = "y, s" if sum_out else "y"
    out_decl = f"{dtype}[B,S,{H}] y" + (f", {dtype}[B,S,{H}] s" if sum_out else "")
    ins = f"{dtype}[B,S,{H}] x" + (f", {dtype}[B,S,{H}] r" if residual else "")
    return f"""
    g ({ins}) => ({out_decl}) <{", ".join(inits)}> {{
      {outs} = ai.onnxopt.{op} <epsilon=1e-5, has_residual={int(residual)}> ({args})
    }}"""


def feeds(residual=True):
    f = {"x": x(2, 5, H)}
    if residual:
        f["r"] = x(2, 5, H)
    return f


@pytest.mark.parametrize("residual,sum_out", [(False, False), (True, False), (True, True)])
def test_layer_norm17(check_kernel, residual, sum_out):
    text = norm("LayerNormFused", residual=residual, sum_out=sum_out)
    bound = check_kernel(text, "onnx.LayerNormalization-17", feeds(residual))
    assert "LayerNormalization" in bound.ops
    # the residual is a Sum: ORT would fuse Add + LayerNormalization into its slow CPU
    # SkipLayerNormalization
    assert ("Sum" in bound.ops) == residual and "Add" not in bound.ops


def test_layer_norm17_without_weights(check_kernel):
    check_kernel(norm("LayerNormFused", residual=False, sum_out=False, gamma=False, beta=False),
                 "onnx.LayerNormalization-17", feeds(False))


@pytest.mark.parametrize("sum_out", [False, True])
def test_skip_layer_norm(check_kernel, sum_out):
    bound = check_kernel(norm("LayerNormFused", residual=True, sum_out=sum_out),
                         "ort.SkipLayerNormalization", feeds())
    assert "com.microsoft.SkipLayerNormalization" in bound.ops


@pytest.mark.parametrize("residual,sum_out", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("opset", [17, 18])
def test_rms_norm_in_the_spelling_ort_fuses(check_kernel, residual, sum_out, opset, tmp_path):
    bound = check_kernel(norm("RMSNormFused", residual=residual, sum_out=sum_out),
                         "decompose.RMSNormFused.ort_fusable", feeds(residual), opset=opset)
    assert "Div" in bound.ops and "Reciprocal" not in bound.ops
    # ... which ONNX Runtime turns into one SimplifiedLayerNormalization at load time
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_model := tmp_path / "ort_optimized.onnx")
    ort.InferenceSession(bound.proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert "SimplifiedLayerNormalization" in [n.op_type for n in onnx.load(tmp_model).graph.node]


def test_simplified_layer_norm_matches_but_is_not_a_standard_op(bind_text, kernel, rel_err):
    import dataclasses

    legal = dataclasses.replace(kernel("ort.SimplifiedLayerNormalization"), requires=None)
    text = norm("RMSNormFused", residual=True, sum_out=True)
    bound = bind_text(text, registry=[legal])
    reference = bind_text(text, "decompose.RMSNormFused")
    f = feeds()
    for got, want in zip(bound.run(f), reference.run(f)):
        assert rel_err(got, want) < 1e-4
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(bound.proto)


@pytest.mark.parametrize("sum_out", [False, True])
def test_skip_simplified_layer_norm(check_kernel, sum_out):
    check_kernel(norm("RMSNormFused", residual=True, sum_out=sum_out),
                 "ort.SkipSimplifiedLayerNormalization", feeds())


def test_rms_normalization23(check_kernel):
    check_kernel(norm("RMSNormFused", residual=True, sum_out=True), "onnx.RMSNormalization-23",
                 feeds(), opset=23)


def test_norm_rejections(bind_text, registry):
    report = bind_text(norm("LayerNormFused", residual=False, sum_out=False),
                       registry=registry).report
    reasons = {k.name: str(r) for k, r in report.selections[0].rejected}
    assert reasons["ort.SkipLayerNormalization"] == "fuses a residual Add; the node has none"
    report = bind_text(norm("RMSNormFused", residual=False, sum_out=False),
                       registry=registry).report
    reasons = {k.name: str(r) for k, r in report.selections[0].rejected}
    assert reasons["onnx.RMSNormalization-23"] == "needs opset 23; the model imports opset 18"
    assert reasons["ort.SimplifiedLayerNormalization"].startswith(
        "ORT registers it in the ONNX domain, where it is no standard op")
    assert report.selections[0].chosen.name == "decompose.RMSNormFused.ort_fusable"


def gelu(approximate: str, bias: bool):
    init = f"<float[{H}] bias = {{{', '.join(f'{0.05 * i:.2f}' for i in range(H))}}}>" if bias else ""
    args = "x, bias" if bias else "x"
    return f"""
    g (float[B,S,{H}] x) => (float[B,S,{H}] y) {init} {{
      y = ai.onnxopt.GeluFused <approximate="{approximate}"> ({args})
    }}"""


@pytest.mark.parametrize("kernel_name,approximate,bias,opset", [
    ("ort.Gelu", "none", False, 18), ("ort.Gelu", "none", True, 18),
    ("ort.BiasGelu", "none", True, 18),
    ("ort.FastGelu", "tanh", False, 18), ("ort.FastGelu", "tanh", True, 18),
    ("onnx.Gelu-20", "none", True, 20), ("onnx.Gelu-20", "tanh", False, 20),
])
def test_gelu_kernels(check_kernel, kernel_name, approximate, bias, opset):
    check_kernel(gelu(approximate, bias), kernel_name, {"x": 3 * x(2, 5, H)}, opset=opset)


def test_gelu_rejections(bind_text, registry):
    report = bind_text(gelu("tanh", False), registry=registry).report
    reasons = {k.name: str(r) for k, r in report.selections[0].rejected}
    assert reasons["ort.Gelu"] == "computes the erf GELU; the node is tanh"
    assert reasons["ort.BiasGelu"] == "computes the erf GELU; the node is tanh"
    assert reasons["onnx.Gelu-20"] == "needs opset 20; the model imports opset 18"


SILU = f"""
g (float[B,S,{H}] x) => (float[B,S,{H}] y) {{
  y = ai.onnxopt.SiluFused (x)
}}"""
SWIGLU = f"""
g (float[B,S,{H}] x, float[B,S,{H}] u) => (float[B,S,{H}] y) {{
  y = ai.onnxopt.SwiGLUFused (x, u)
}}"""


def test_silu_and_swiglu(check_kernel):
    check_kernel(SILU, "ort.QuickGelu", {"x": 4 * x(2, 5, H)})
    check_kernel(SILU, "onnx.Swish-24", {"x": 4 * x(2, 5, H)}, opset=24)
    check_kernel(SWIGLU, "ort.QuickGelu.mul", {"x": 4 * x(2, 5, H), "u": x(2, 5, H)})


def test_rotary_is_rejected_with_reasons(bind_text, registry):
    text = """
    g (float[B,4,S,8] x, float[1,1,S,8] c, float[1,1,S,8] s) => (float[B,4,S,8] y) {
      y = ai.onnxopt.RotaryFused <interleaved=0, rotary_dim=0> (x, c, s)
    }"""
    report = bind_text(text, registry=registry, opset=23).report
    assert report.selections[0].chosen.name == "decompose.RotaryFused"
    reasons = {k.name: str(r) for k, r in report.selections[0].rejected}
    assert "half-width cos/sin" in reasons["onnx.RotaryEmbedding-23"]
    # cos/sin given as inputs: nothing proves their halves equal
    assert reasons["ort.RotaryEmbedding"] == (
        "reads half-width cos/sin caches (one value per frequency); the node's full-width "
        "cos/sin are not proved to be two equal halves")


# cos/sin built as the models build them: cos(concat(f, f)) scaled, a head axis added; the
# frequencies per batch row (positions after a cache, left padding) or shared (batch 1).
ROTARY_HALVES = """
g (float[B,4,S,8] x, float[{fb},S,4] f) => (float[B,4,S,8] y) {{
  axis = Constant <value = int64[1] {{1}}> ()
  two = Constant <value = float {{2.0}}> ()
  e = Concat <axis = -1> (f, f)
  ce = Cos (e)
  cm = Mul (ce, two)
  c = Unsqueeze (cm, axis)
  se = Sin (e)
  s = Unsqueeze (se, axis)
  y = ai.onnxopt.RotaryFused <interleaved=0, rotary_dim=0> (x, c, s)
}}"""


@pytest.mark.parametrize("fb", ["B", "1"])
def test_rotary_on_proved_halves_is_ort_rotary_embedding(check_kernel, fb):
    rng = np.random.default_rng(3)
    for batch, seq in ((2, 5), (3, 1), (1, 7)):
        feeds = {"x": rng.standard_normal((batch, 4, seq, 8), dtype=np.float32),
                 "f": 3 * rng.standard_normal((batch if fb == "B" else 1, seq, 4),
                                              dtype=np.float32)}
        bound = check_kernel(ROTARY_HALVES.format(fb=fb), "ort.RotaryEmbedding", feeds,
                             tol=1e-5)
    assert "com.microsoft.RotaryEmbedding" in bound.ops


@pytest.mark.parametrize("body, code", [
    ("e = Concat <axis = -1> (f, g2)", "half_width_caches"),  # two different halves
    ("e = Concat <axis = 0> (f, f)", "cache_shape"),  # not the last axis
])
def test_rotary_halves_not_proved(bind_text, registry, body, code):
    text = ROTARY_HALVES.format(fb="1").replace("e = Concat <axis = -1> (f, f)", body).replace(
        "float[1,S,4] f)", "float[1,S,4] f, float[1,S,4] g2)")
    report = bind_text(text, registry=registry).report
    (selection,) = report.selections
    assert selection.chosen.name == "decompose.RotaryFused"
    reasons = {k.name: r for k, r in selection.rejected}
    assert reasons["ort.RotaryEmbedding"].code == code


def test_rms_fusable_spelling_needs_a_weight(bind_text, registry):
    report = bind_text(norm("RMSNormFused", residual=False, sum_out=False, gamma=False),
                       registry=registry).report
    reasons = {k.name: str(r) for k, r in report.selections[0].rejected}
    assert reasons["decompose.RMSNormFused.ort_fusable"] == (
        "ORT fuses the spelling only with its weight Mul, and the weight is all ones")


def test_emitted_nodes_name_their_kernel_and_declare_no_shapes(bind_text):
    bound = bind_text(norm("RMSNormFused", residual=True, sum_out=False),
                      "decompose.RMSNormFused.ort_fusable")
    for node in bound.proto.graph.node:
        assert {p.key: p.value for p in node.metadata_props} == {
            "onnxopt.kernel": "decompose.RMSNormFused.ort_fusable"}
    assert not bound.proto.graph.value_info
