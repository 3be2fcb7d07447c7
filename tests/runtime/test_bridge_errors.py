"""Failures surface as exceptions with the Python message, and never poison the session."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from onnxopt.runtime import RuntimeUnavailable, cpu_kernel, cuda_kernel, session
from onnxopt.runtime.session import kernels_for

DOMAIN = "ai.onnxopt.test"


def test_kernel_exception_becomes_ort_error_and_session_stays_usable(registry, model):
    @cpu_kernel(DOMAIN, "Picky", inputs=["x: float32"], outputs=["y: float32"], registry=registry)
    def picky(x):
        if (x < 0).any():
            raise ValueError(f"picky got a negative value: {x.min()}")
        return np.sqrt(x)

    sess = session(
        model("g (float[N] x) => (float[N] y) { y = ai.onnxopt.test.Picky (x) }"), registry=registry
    )
    with pytest.raises(Exception, match=r"picky got a negative value: -4\.0") as caught:
        sess.run(None, {"x": np.array([1, -4], np.float32)})
    assert "ValueError" in str(caught.value)
    assert "ai.onnxopt.test::Picky" in str(caught.value)
    for _ in range(3):  # the same session still runs, repeatedly
        (y,) = sess.run(None, {"x": np.array([4, 9], np.float32)})
        np.testing.assert_array_equal(y, [2, 3])


def test_wrong_result_shape_in_shape_mode_is_reported(registry, model):
    @cpu_kernel(
        DOMAIN,
        "Bad",
        inputs=["x: float32"],
        outputs=["y: float32"],
        shape=lambda x: [x.shape, x.shape],
        registry=registry,
    )
    def bad(x, *, out):
        out[...] = x

    sess = session(
        model("g (float[N] x) => (float[N] y) { y = ai.onnxopt.test.Bad (x) }"), registry=registry
    )
    with pytest.raises(Exception, match="shape function returned 2 shapes for 1 outputs"):
        sess.run(None, {"x": np.ones(2, np.float32)})


def test_returning_wrong_kind_of_dtype_is_reported(registry, model):
    @cpu_kernel(DOMAIN, "ToInt", inputs=["x: float32"], outputs=["y: int64"], registry=registry)
    def to_int(x):
        return x * 1.5  # float into an int64 output: refused, not silently truncated

    sess = session(
        model("g (float[N] x) => (int64[N] y) { y = ai.onnxopt.test.ToInt (x) }"), registry=registry
    )
    with pytest.raises(Exception, match="Cannot cast"):
        sess.run(None, {"x": np.ones(2, np.float32)})


def test_inputs_are_read_only(registry, model):
    @cpu_kernel(DOMAIN, "Vandal", inputs=["x: float32"], outputs=["y: float32"], registry=registry)
    def vandal(x):
        x[0] = 42.0
        return x

    sess = session(
        model("g (float[N] x) => (float[N] y) { y = ai.onnxopt.test.Vandal (x) }"),
        registry=registry,
    )
    with pytest.raises(Exception, match="read-only"):
        sess.run(None, {"x": np.ones(2, np.float32)})


def test_missing_required_attribute_fails_session_creation(registry, model):
    @cpu_kernel(
        DOMAIN,
        "NeedsK",
        inputs=["x: float32"],
        outputs=["y: float32"],
        attrs={"k": int},
        registry=registry,
    )
    def needs_k(x, *, k):
        return x * k

    m = model("g (float[N] x) => (float[N] y) { y = ai.onnxopt.test.NeedsK (x) }")
    with pytest.raises(Exception, match="attribute 'k' \\(int\\) is required"):
        session(m, registry=registry)


def test_mistyped_attribute_is_not_replaced_by_the_default(registry, model):
    @cpu_kernel(
        DOMAIN,
        "Scale",
        inputs=["x: float32"],
        outputs=["y: float32"],
        attrs={"alpha": float},
        registry=registry,
    )
    def scale(x, *, alpha=1.0):
        return x * alpha

    m = model("g (float[N] x) => (float[N] y) { y = ai.onnxopt.test.Scale <alpha = 2> (x) }")
    with pytest.raises(Exception, match="attribute 'alpha' \\(float\\) cannot be read"):
        session(m, registry=registry)


def test_cuda_only_op_without_cuda_raises_runtime_unavailable(registry, model):
    @cuda_kernel(
        DOMAIN,
        "FlashThing",
        inputs=["x: float16"],
        outputs=["y: float16"],
        shape=lambda x: [x.shape],
        registry=registry,
    )
    def flash_thing(ctx, x, *, out):
        raise AssertionError("never called on a CPU session")

    m = model("g (float16[N] x) => (float16[N] y) { y = ai.onnxopt.test.FlashThing (x) }")
    with pytest.raises(RuntimeUnavailable) as caught:
        session(m, providers=["CPUExecutionProvider"], registry=registry)
    message = str(caught.value)
    assert "ai.onnxopt.test::FlashThing has only a CUDA kernel" in message
    assert "\n" not in message


def test_undeclared_op_in_a_served_domain_is_named(registry, model):
    @cpu_kernel(DOMAIN, "Known", inputs=["x: float32"], outputs=["y: float32"], registry=registry)
    def known(x):
        return x

    m = model("g (float[N] x) => (float[N] y) { y = ai.onnxopt.test.Unknown (x) }")
    with pytest.raises(
        RuntimeUnavailable, match="ai.onnxopt.test::Unknown, but no kernel is declared"
    ):
        session(m, registry=registry)


def test_cpu_and_cuda_kernels_of_one_op(registry, model):
    """A CUDA kernel with a CPU twin: a CPU session runs the twin; CUDA sessions get both."""

    @cpu_kernel(
        DOMAIN,
        "Twin",
        inputs=["x: float32", "n?: int64"],
        outputs=["y: float32"],
        registry=registry,
    )
    def twin_cpu(x, n=None):
        return x + 1

    @cuda_kernel(
        DOMAIN,
        "Twin",
        inputs=["x: float32", "n?: int64"],
        outputs=["y: float32"],
        shape=lambda x, n=None: [x.shape],
        registry=registry,
    )
    def twin_cuda(ctx, x, n=None, *, out):
        raise AssertionError("not on a CPU session")

    m = model("g (float[N] x) => (float[N] y) { y = ai.onnxopt.test.Twin (x) }")
    providers = {k.provider for k in kernels_for(m, on_cuda=True, registry=registry)}
    assert providers == {"CPUExecutionProvider", "CUDAExecutionProvider"}
    assert {k.provider for k in kernels_for(m, on_cuda=False, registry=registry)} == {
        "CPUExecutionProvider"
    }
    (y,) = session(m, providers=["CPUExecutionProvider"], registry=registry).run(
        None, {"x": np.zeros(2, np.float32)}
    )
    np.testing.assert_array_equal(y, [1, 1])


def test_cuda_struct_registers_beside_cpu_kernel(registry, model):
    """Registering the CUDA-provider struct itself (what a GPU session does) is accepted by ORT."""
    from onnxopt.runtime import domains
    from onnxopt.runtime.registry import Port

    @cpu_kernel(
        DOMAIN,
        "Both",
        inputs=["x: float32", "shape: int64"],
        outputs=["y: float32"],
        registry=registry,
    )
    def both_cpu(x, shape):
        return x * 3

    @cuda_kernel(
        DOMAIN,
        "Both",
        inputs=["x: float32", Port("shape", "int64", on_cpu=True)],
        outputs=["y: float32"],
        shape=lambda x, shape: [x.shape],
        registry=registry,
    )
    def both_cuda(ctx, x, shape, *, out):
        raise AssertionError("not on a CPU session")

    m = model("g (float[N] x, int64[1] s) => (float[N] y) { y = ai.onnxopt.test.Both (x, s) }")
    options = ort.SessionOptions()
    domains.register(options, registry.kernels(DOMAIN))
    sess = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": np.ones(2, np.float32), "s": np.array([2])})
    np.testing.assert_array_equal(y, [3, 3])


def test_model_without_custom_ops_gets_a_plain_session(registry, model):
    m = model("g (float[N] x) => (float[N] y) { y = Relu (x) }")
    (y,) = session(m, registry=registry).run(None, {"x": np.array([-1, 2], np.float32)})
    np.testing.assert_array_equal(y, [0, 2])
