"""Kernels see ORT's own memory: input views and output buffers are never copies."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from onnxopt.runtime import cpu_kernel, session

DOMAIN = "ai.onnxopt.test"


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_kernel_reads_and_writes_the_callers_buffers(registry, model):
    """With IOBinding over NumPy arrays, the kernel's views sit at the caller's very addresses."""
    seen = {}

    @cpu_kernel(
        DOMAIN,
        "Double",
        inputs=["x: float32"],
        outputs=["y: float32"],
        shape=lambda x: [x.shape],
        registry=registry,
    )
    def double(x, *, out):
        seen.update(
            x=_address(x),
            out=_address(out),
            x_writeable=x.flags.writeable,
            x_owns=x.flags.owndata,
            out_owns=out.flags.owndata,
        )
        np.multiply(x, 2, out=out)

    sess = session(
        model("g (float[N] x) => (float[N] y) { y = ai.onnxopt.test.Double (x) }"),
        registry=registry,
    )
    x = np.arange(16, dtype=np.float32)
    y = np.full(16, -1, np.float32)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x))
    binding.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_numpy(y))
    sess.run_with_iobinding(binding)

    assert seen["x"] == _address(x)  # the input view is the caller's array, not a copy
    assert seen["out"] == _address(y)  # the output view is the caller's buffer
    assert not seen["x_owns"] and not seen["out_owns"]
    assert seen["x_writeable"] is False
    np.testing.assert_array_equal(y, x * 2)  # written in place, visible without any fetch


def test_one_kernels_output_buffer_is_the_next_kernels_input(registry, model):
    """Between two custom ops, ORT hands the producer's output buffer to the consumer as is."""
    addresses = {}

    @cpu_kernel(
        DOMAIN,
        "Fill",
        inputs=["x: float32"],
        outputs=["y: float32"],
        shape=lambda x: [x.shape],
        registry=registry,
    )
    def fill(x, *, out):
        addresses["written"] = _address(out)
        out[...] = 7.0

    @cpu_kernel(DOMAIN, "Probe", inputs=["x: float32"], outputs=["y: float32"], registry=registry)
    def probe(x):
        addresses["read"] = _address(x)
        return x + 1

    m = model("""g (float[N] x) => (float[N] y) {
        t = ai.onnxopt.test.Fill (x)
        y = ai.onnxopt.test.Probe (t)
    }""")
    (y,) = session(m, registry=registry).run(None, {"x": np.zeros(1024, np.float32)})
    assert addresses["written"] == addresses["read"]
    np.testing.assert_array_equal(y, np.full(1024, 8.0, np.float32))
