"""GroupNormFused: the decomposition in ONNX Runtime matches the float64 reference, with and
without weights, with SiLU, for 1-D, 2-D and 3-D spatial inputs and float16; float64 (no
InstanceNormalization kernel in ORT) takes the ReduceMean spelling."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.ops import FUSED_OPS
from onnxopt.ops.group_norm import reference_group_norm

GN = """
g ({t}[n, 12, {spatial}] x, {t}[12] gamma, {t}[12] beta) => ({t}[n, 12, {spatial}] y) {{
    y = ai.onnxopt.GroupNormFused ({inputs}) <groups = 3, epsilon = 0.00001{attrs}>
}}
"""


def _text(t="float", spatial="h, w", inputs="x, gamma, beta", attrs=""):
    return GN.format(t=t, spatial=spatial, inputs=inputs, attrs=attrs)


def _feeds(rng, shape, dtype=np.float32):
    return {"x": (rng.standard_normal(shape) * 3 + 1).astype(dtype),
            "gamma": rng.standard_normal(12).astype(dtype),
            "beta": rng.standard_normal(12).astype(dtype)}


def test_schema_is_registered():
    op = FUSED_OPS["GroupNormFused"]
    assert [(p.name, p.optional) for p in op.inputs] == [("X", False), ("gamma", True),
                                                         ("beta", True)]
    assert [(p.name, p.optional) for p in op.outputs] == [("Y", False)]
    assert op.attrs().as_attributes() == {"groups": 1, "epsilon": 1e-5, "activation": ""}


@pytest.mark.parametrize("inputs", ["x, gamma, beta", "x, gamma", "x", "x, , beta"])
@pytest.mark.parametrize("activation", ["", "silu"])
def test_decomposition_matches_the_reference(decompose, rng, inputs, activation):
    attrs = f', activation = "{activation}"' if activation else ""
    d = decompose(_text(inputs=inputs, attrs=attrs))
    assert d.ops[:4] == ["Reshape", "InstanceNormalization", "Shape", "Reshape"]
    assert d.ops.count("Sigmoid") == (activation == "silu")
    for shape in ((2, 12, 5, 7), (1, 12, 16, 3)):
        f = _feeds(rng, shape)
        (y,) = d.run(**f)
        given = inputs.split(", ")
        ref = reference_group_norm(f["x"], f["gamma"] if "gamma" in given else None,
                                   f["beta"] if "beta" in given else None, groups=3,
                                   epsilon=1e-5, activation=activation)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spatial, shape", [("l", (2, 12, 9)), ("d, h, w", (2, 12, 3, 4, 5))])
def test_other_spatial_ranks(decompose, rng, spatial, shape):
    d = decompose(_text(spatial=spatial))
    f = _feeds(rng, shape)
    (y,) = d.run(**f)
    ref = reference_group_norm(f["x"], f["gamma"], f["beta"], groups=3, epsilon=1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_float16_uses_instance_normalization(decompose, rng):
    d = decompose(_text(t="float16", attrs=', activation = "silu"'))
    assert "InstanceNormalization" in d.ops
    f = _feeds(rng, (2, 12, 6, 6), np.float16)
    (y,) = d.run(**f)
    ref = reference_group_norm(f["x"], f["gamma"], f["beta"], groups=3, epsilon=1e-5,
                               activation="silu")
    np.testing.assert_allclose(y.astype(np.float32), ref.astype(np.float32), rtol=2e-2, atol=2e-2)


def test_float64_computes_the_statistics_with_reduce_mean(decompose, rng):
    d = decompose(_text(t="double"))
    assert "InstanceNormalization" not in d.ops and d.ops.count("ReduceMean") == 2
    f = _feeds(rng, (2, 12, 4, 4), np.float64)
    (y,) = d.run(**f)
    ref = reference_group_norm(f["x"], f["gamma"], f["beta"], groups=3, epsilon=1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-10)
