"""GeluFused, SiluFused, SwiGLUFused: decompositions in ONNX Runtime match the references."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.ops.activations import reference_gelu, reference_silu, reference_swiglu

GELU = """
g ({t}[batch, 32] x, {t}[32] bias) => ({t}[batch, 32] y) {{
    y = ai.onnxopt.GeluFused ({inputs}) <approximate = "{approximate}">
}}
"""


ERF = ["Mul", "Erf", "Add", "Mul", "Mul"]
TANH = ["Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul", "Mul"]  # GPT-2's NewGELU, op for op


@pytest.mark.parametrize("approximate, ops", [("none", ERF), ("tanh", TANH)])
@pytest.mark.parametrize("inputs", ["x", "x, bias"])
def test_gelu(decompose, rng, approximate, ops, inputs):
    d = decompose(GELU.format(t="float", inputs=inputs, approximate=approximate))
    assert d.ops == ["Add"] * (inputs == "x, bias") + ops
    x = (rng.standard_normal((3, 32)) * 3).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    (y,) = d.run(x=x, bias=bias)
    ref = reference_gelu(x, bias if "bias" in inputs else None, approximate=approximate)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_gelu_float16(decompose, rng):
    d = decompose(GELU.format(t="float16", inputs="x", approximate="none"))
    x = rng.standard_normal((3, 32)).astype(np.float16)
    (y,) = d.run(x=x, bias=np.zeros(32, np.float16))
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), reference_gelu(x.astype(np.float64)),
                               rtol=5e-3, atol=5e-3)


def test_gelu_references_differ_by_the_approximation():
    x = np.linspace(-4, 4, 101)
    exact, tanh = reference_gelu(x), reference_gelu(x, approximate="tanh")
    assert 0 < np.abs(exact - tanh).max() < 1e-3
    np.testing.assert_allclose(reference_gelu(np.array([0.0, 10.0, -10.0])), [0, 10, 0], atol=1e-12)


def test_silu_and_swiglu(decompose, rng):
    d = decompose("""
g (float[batch, 32] gate, float[batch, 32] up) => (float[batch, 32] s, float[batch, 32] y) {
    s = ai.onnxopt.SiluFused (gate)
    y = ai.onnxopt.SwiGLUFused (gate, up)
}
""")
    assert sorted(d.ops) == ["Mul", "Mul", "Mul", "Sigmoid", "Sigmoid"]
    gate = (rng.standard_normal((3, 32)) * 4).astype(np.float32)
    up = rng.standard_normal((3, 32)).astype(np.float32)
    s, y = d.run(gate=gate, up=up)
    np.testing.assert_allclose(s, reference_silu(gate), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, reference_swiglu(gate, up), rtol=1e-5, atol=1e-6)
    assert np.isfinite(reference_silu(np.array([-1e4, 1e4]))).all()
