"""LayerNormFused and RMSNormFused: the decomposition in ONNX Runtime matches the float64
reference, with and without weights, residual, sum output, float16 computed in float32."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.ops import FUSED_OPS
from onnxopt.ops.norms import reference_layer_norm, reference_rms_norm

LN = """
g (float[batch, seq, 16] x, float[16] gamma, float[16] beta, float[batch, seq, 16] r)
    => ({outputs}) {{
    {results} = ai.onnxopt.LayerNormFused ({inputs}) <epsilon = 0.00001{attrs}>
}}
"""
RMS = """
g ({t}[batch, seq, 16] x, {t}[16] gamma, {t}[batch, seq, 16] r) => ({outputs}) {{
    {results} = ai.onnxopt.RMSNormFused ({inputs}) <epsilon = 0.000001{attrs}>
}}
"""
SUM = ", float[batch, seq, 16] s"


def _feeds(rng, dtype=np.float32):
    shapes = {"x": (2, 5, 16), "gamma": (16,), "beta": (16,), "r": (2, 5, 16)}
    return {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}


def _given(f, inputs: str, name: str):
    return f[name] if name in inputs.split(", ") else None


def test_schemas_are_registered():
    ops = dict(FUSED_OPS)
    for name in ("LayerNormFused", "RMSNormFused", "GeluFused", "SiluFused", "SwiGLUFused",
                 "RotaryFused"):
        assert ops[name].decompose is not None and ops[name].reference is not None
    assert [(p.name, p.optional) for p in FUSED_OPS["LayerNormFused"].inputs] == [
        ("X", False), ("gamma", True), ("beta", True), ("residual", True)]
    assert [(p.name, p.optional) for p in FUSED_OPS["RMSNormFused"].outputs] == [
        ("Y", False), ("S", True)]


@pytest.mark.parametrize("opset", [18, 16])  # LayerNormalization from 17; primitives before
@pytest.mark.parametrize("inputs", ["x, gamma, beta", "x, gamma", "x", "x, , beta"])
def test_layer_norm_decomposition(decompose, rng, opset, inputs):
    text = LN.format(outputs="float[batch, seq, 16] y", results="y", inputs=inputs, attrs="")
    d = decompose(text, opset=opset)
    if opset >= 17:
        assert d.ops == ["LayerNormalization"]
    else:
        affine = ["Mul"] * ("gamma" in inputs) + ["Add"] * ("beta" in inputs)
        assert d.ops == ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", *affine]
    f = _feeds(rng)
    (y,) = d.run(**f)
    ref = reference_layer_norm(f["x"], _given(f, inputs, "gamma"), _given(f, inputs, "beta"),
                               epsilon=1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [18, 16])
def test_layer_norm_with_residual_and_sum(decompose, rng, opset):
    text = LN.format(outputs="float[batch, seq, 16] y" + SUM, results="y, s",
                     inputs="x, gamma, beta, r", attrs=", has_residual = 1")
    f = _feeds(rng)
    y, s = decompose(text, opset=opset).run(**f)
    ref_y, ref_s = reference_layer_norm(f["x"], f["gamma"], f["beta"], f["r"], epsilon=1e-5,
                                        has_residual=1)
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s, ref_s, rtol=1e-6)


@pytest.mark.parametrize("opset", [18, 17])  # ReduceMean's axes: an input at 18, attribute before
@pytest.mark.parametrize("inputs", ["x, gamma", "x", "x, gamma, r", "x, , r"])
def test_rms_norm_decomposition(decompose, rng, opset, inputs):
    residual = "r" in inputs
    text = RMS.format(t="float", outputs="float[batch, seq, 16] y" + SUM * residual,
                      results="y, s" if residual else "y", inputs=inputs,
                      attrs=", has_residual = 1" * residual)
    d = decompose(text, opset=opset)
    assert d.ops == (["Add"] * residual + ["Pow", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Mul"]
                     + ["Mul"] * ("gamma" in inputs))
    f = _feeds(rng)
    got = d.run(**f)
    ref = reference_rms_norm(f["x"], _given(f, inputs, "gamma"), _given(f, inputs, "r"),
                             epsilon=1e-6, has_residual=int(residual))
    for a, b in zip(got, ref if residual else [ref]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_float16_rms_norm_computed_in_float32(decompose, rng):
    text = RMS.format(t="float16", outputs="float16[batch, seq, 16] y", results="y",
                      inputs="x, gamma", attrs=', compute_dtype = "float32"')
    d = decompose(text)
    assert d.ops == ["Cast", "Pow", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Mul", "Cast", "Mul"]
    f = _feeds(rng, np.float16)
    (y,) = d.run(**f)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), reference_rms_norm(f["x"], f["gamma"]),
                               rtol=2e-3, atol=2e-3)


def test_float16_layer_norm_computed_in_float32(decompose, rng):
    text = LN.replace("float[", "float16[").format(
        outputs="float16[batch, seq, 16] y", results="y", inputs="x, gamma, beta",
        attrs=', compute_dtype = "float32"')
    for opset, ops in ((18, ["LayerNormalization"]), (16, ["Cast", "ReduceMean"])):
        d = decompose(text, opset=opset)
        assert d.ops[:len(ops)] == ops
        f = _feeds(rng, np.float16)
        (y,) = d.run(**f)
        ref = reference_layer_norm(f["x"], f["gamma"], f["beta"], epsilon=1e-5)
        np.testing.assert_allclose(y.astype(np.float64), ref, rtol=5e-3, atol=5e-3)


def test_references_normalise():
    x = np.arange(8.0).reshape(2, 4)
    y = reference_layer_norm(x, epsilon=0.0)
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), 1, atol=1e-12)
    z = reference_rms_norm(x, epsilon=0.0)
    np.testing.assert_allclose((z * z).mean(-1), 1, atol=1e-12)
