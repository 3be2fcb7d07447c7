"""Kernels compute the right numbers through ORT: attributes, optional and variadic inputs, dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.runtime import cpu_kernel, session

DOMAIN = "ai.onnxopt.test"


def test_float_attribute_and_default(registry, model):
    @cpu_kernel(
        DOMAIN,
        "ScaledAdd",
        inputs=["a: float32", "b: float32"],
        outputs=["y: float32"],
        attrs={"alpha": float},
        registry=registry,
    )
    def scaled_add(a, b, *, alpha=1.0):
        return a + alpha * b

    m = model("""g (float[N] a, float[N] b) => (float[N] y, float[N] z) {
        y = ai.onnxopt.test.ScaledAdd <alpha = 0.5> (a, b)
        z = ai.onnxopt.test.ScaledAdd (a, b)
    }""")
    a, b = np.random.rand(5).astype(np.float32), np.random.rand(5).astype(np.float32)
    y, z = session(m, registry=registry).run(None, {"a": a, "b": b})
    np.testing.assert_allclose(y, a + 0.5 * b, rtol=1e-6)
    np.testing.assert_allclose(z, a + b, rtol=1e-6)


def test_optional_input(registry, model):
    @cpu_kernel(
        DOMAIN,
        "RMSNorm",
        inputs=["x: float32", "gamma: float32", "residual?: float32"],
        outputs=["y: float32"],
        attrs={"epsilon": float},
        registry=registry,
    )
    def rms_norm(x, gamma, residual=None, *, epsilon=1e-5):
        if residual is not None:
            x = x + residual
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + epsilon) * gamma

    m = model("""g (float[2, 8] x, float[8] gamma, float[2, 8] r) => (float[2, 8] plain, float[2, 8] fused) {
        plain = ai.onnxopt.test.RMSNorm <epsilon = 0.001> (x, gamma)
        fused = ai.onnxopt.test.RMSNorm <epsilon = 0.001> (x, gamma, r)
    }""")
    x, gamma, r = (np.random.rand(*s).astype(np.float32) for s in [(2, 8), (8,), (2, 8)])
    plain, fused = session(m, registry=registry).run(None, {"x": x, "gamma": gamma, "r": r})
    np.testing.assert_allclose(plain, rms_norm(x, gamma, epsilon=1e-3), rtol=1e-5)
    np.testing.assert_allclose(fused, rms_norm(x, gamma, r, epsilon=1e-3), rtol=1e-5)


def test_string_and_int_array_attributes(registry, model):
    @cpu_kernel(
        DOMAIN,
        "Reduce",
        inputs=["x: float32"],
        outputs=["y: float32"],
        attrs={"mode": str, "axes": list[int]},
        registry=registry,
    )
    def reduce(x, *, mode, axes):
        return getattr(np, mode)(x, axis=tuple(axes))

    m = model("""g (float[2, 3, 4] x) => (float[3] s, float[2] m) {
        s = ai.onnxopt.test.Reduce <mode = "sum", axes = [0, 2]> (x)
        m = ai.onnxopt.test.Reduce <mode = "max", axes = [1, 2]> (x)
    }""")
    x = np.random.rand(2, 3, 4).astype(np.float32)
    s, mx = session(m, registry=registry).run(None, {"x": x})
    np.testing.assert_allclose(s, x.sum(axis=(0, 2)), rtol=1e-6)
    np.testing.assert_array_equal(mx, x.max(axis=(1, 2)))


def test_float_array_and_int_attributes(registry, model):
    @cpu_kernel(
        DOMAIN,
        "Poly",
        inputs=["x: float64"],
        outputs=["y: float64"],
        attrs={"coefficients": list[float], "repeat": int},
        registry=registry,
    )
    def poly(x, *, coefficients, repeat=1):
        return np.polyval(coefficients, x) * repeat

    m = model("""g (double[4] x) => (double[4] y) {
        y = ai.onnxopt.test.Poly <coefficients = [1.5, -2.0, 0.25], repeat = 3> (x)
    }""")
    x = np.linspace(-1, 1, 4)
    (y,) = session(m, registry=registry).run(None, {"x": x})
    np.testing.assert_allclose(y, np.polyval([1.5, -2.0, 0.25], x) * 3)


def test_float16(registry, model):
    @cpu_kernel(
        DOMAIN, "HalfGelu", inputs=["x: float16"], outputs=["y: float16"], registry=registry
    )
    def half_gelu(x):
        assert x.dtype == np.float16
        return (x * 0.5 * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))).astype(np.float16)

    m = model("""g (float16[N] x) => (float16[N] y) { y = ai.onnxopt.test.HalfGelu (x) }""")
    x = np.linspace(-3, 3, 11).astype(np.float16)
    (y,) = session(m, registry=registry).run(None, {"x": x})
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, half_gelu(x))


@pytest.mark.parametrize(
    "dtype, onnx_type",
    [
        (np.int64, "int64"),
        (np.int32, "int32"),
        (np.bool_, "bool"),
        (np.float64, "double"),
    ],
)
def test_dtypes_through_an_any_typed_op(registry, model, dtype, onnx_type):
    @cpu_kernel(DOMAIN, "Reverse", inputs=["x: any"], outputs=["y: any"], registry=registry)
    def reverse(x):
        return x[::-1]

    m = model(
        f"""g ({onnx_type}[N] x) => ({onnx_type}[N] y) {{ y = ai.onnxopt.test.Reverse (x) }}"""
    )
    x = (np.arange(6) % 4).astype(dtype)
    (y,) = session(m, registry=registry).run(None, {"x": x})
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, x[::-1])


def test_mixed_declared_dtypes(registry, model):
    @cpu_kernel(
        DOMAIN,
        "Mask",
        inputs=["x: float32", "keep: bool", "fill: int32"],
        outputs=["y: float32", "count: int64"],
        registry=registry,
    )
    def mask(x, keep, fill):
        return np.where(keep, x, np.float32(fill[0])), np.array(keep.sum(), np.int64)

    m = model("""g (float[4] x, bool[4] keep, int32[1] fill) => (float[4] y, int64 count) {
        y, count = ai.onnxopt.test.Mask (x, keep, fill)
    }""")
    x = np.arange(4, dtype=np.float32)
    keep = np.array([True, False, True, False])
    y, count = session(m, registry=registry).run(
        None, {"x": x, "keep": keep, "fill": np.array([-7], np.int32)}
    )
    np.testing.assert_array_equal(y, [0, -7, 2, -7])
    assert count == 2


def test_variadic_input(registry, model):
    @cpu_kernel(
        DOMAIN, "SumAll", inputs=["xs*: float32"], outputs=["y: float32"], registry=registry
    )
    def sum_all(*xs):
        return np.sum(xs, axis=0)

    m = model("""g (float[3] a, float[3] b, float[3] c) => (float[3] two, float[3] three) {
        two = ai.onnxopt.test.SumAll (a, b)
        three = ai.onnxopt.test.SumAll (a, b, c)
    }""")
    a, b, c = (np.full(3, v, np.float32) for v in (1, 2, 4))
    two, three = session(m, registry=registry).run(None, {"a": a, "b": b, "c": c})
    np.testing.assert_array_equal(two, [3, 3, 3])
    np.testing.assert_array_equal(three, [7, 7, 7])


def test_shape_function_writes_into_ort_outputs(registry, model):
    def split_shapes(x, *, parts):
        return [(x.shape[0] // parts,), (x.shape[0] - x.shape[0] // parts,)]

    @cpu_kernel(
        DOMAIN,
        "SplitTwo",
        inputs=["x: float32"],
        outputs=["head: float32", "tail: float32"],
        attrs={"parts": int},
        shape=split_shapes,
        registry=registry,
    )
    def split_two(x, *, out, parts):
        head, tail = out
        head[...] = x[: head.shape[0]]
        tail[...] = x[head.shape[0] :]

    m = model("""g (float[N] x) => (float[A] head, float[B] tail) {
        head, tail = ai.onnxopt.test.SplitTwo <parts = 3> (x)
    }""")
    x = np.arange(9, dtype=np.float32)
    head, tail = session(m, registry=registry).run(None, {"x": x})
    np.testing.assert_array_equal(head, x[:3])
    np.testing.assert_array_equal(tail, x[3:])


def test_custom_op_between_native_ops(registry, model):
    @cpu_kernel(
        DOMAIN,
        "Square",
        inputs=["x: float32"],
        outputs=["y: float32"],
        shape=lambda x: [x.shape],
        registry=registry,
    )
    def square(x, *, out):
        np.multiply(x, x, out=out)

    m = model("""g (float[2, 3] x) => (float[3, 2] y) {
        t = Transpose <perm = [1, 0]> (x)
        s = ai.onnxopt.test.Square (t)
        y = Relu (s)
    }""")
    x = np.random.randn(2, 3).astype(np.float32)
    (y,) = session(m, registry=registry).run(None, {"x": x})
    np.testing.assert_allclose(y, (x.T) ** 2, rtol=1e-6)


def test_ops_of_a_domain_from_two_declarations_share_one_registration(registry, model):
    @cpu_kernel(DOMAIN, "Neg", inputs=["x: float32"], outputs=["y: float32"], registry=registry)
    def neg(x):
        return -x

    @cpu_kernel(DOMAIN, "Twice", inputs=["x: float32"], outputs=["y: float32"], registry=registry)
    def twice(x):
        return 2 * x

    m = model("""g (float[2] x) => (float[2] y) {
        n = ai.onnxopt.test.Neg (x)
        y = ai.onnxopt.test.Twice (n)
    }""")
    (y,) = session(m, registry=registry).run(None, {"x": np.array([1, 2], np.float32)})
    np.testing.assert_array_equal(y, [-2, -4])
