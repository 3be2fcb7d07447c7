"""The ai.onnxopt.cuda ops' CUDA kernels on a GPU: against their CPU kernels (float64
references) on ragged shapes with padding and poisoned outputs; through ORT's CPU provider with
the staged registry (copies inside the kernel wrapper, for CPU-only ORT builds); and through
ORT's CUDA provider where it is usable (IO binding, CUDA-graph capture, models padded on
the left). Skipped where onnxopt's CUDA kernels cannot run (no device, no PyCUDA, no image
and no nvcc). Device memory comes from PyCUDA.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.runtime import DeviceTensor, KernelContext, cuda_available, session
from onnxopt.runtime.ops import activations as act_ops
from onnxopt.runtime.ops import attention as attn_ops
from onnxopt.runtime.ops import norms as norm_ops
from onnxopt.runtime.ops.examples import attention_feeds, attention_model
from onnxopt.runtime.ops.staged import TIMES, staged_registry

REASON = cuda_available.device_unavailable_reason()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(REASON is not None, reason=f"gpu test: {REASON}")]
DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 1e-4}
RNG = np.random.default_rng(1)


class Buffers:
    """Device copies of host arrays, and poisoned (0xFF: NaN) output buffers (PyCUDA memory)."""

    def __init__(self) -> None:
        from onnxopt.runtime.cuda import loader
        from onnxopt.runtime.cuda import pycuda_backend as pyc

        self.pyc = pyc
        loader.ensure_context()
        self.allocations: list = []

    def _alloc(self, nbytes: int) -> int:
        allocation = self.pyc.mem_alloc(nbytes)
        self.allocations.append(allocation)
        return int(allocation)

    def put(self, host: np.ndarray) -> DeviceTensor:
        host = np.ascontiguousarray(host)
        ptr = self._alloc(host.nbytes)
        self.pyc.memcpy_htod(ptr, host)
        self.pyc.synchronize()  # the kernels run on another (non-blocking) stream
        return DeviceTensor(ptr, host.shape, host.dtype, readonly=True)

    def poisoned(self, shape, dtype) -> DeviceTensor:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        ptr = self._alloc(nbytes)
        self.pyc.memset_d8(ptr, 0xFF, nbytes)
        self.pyc.synchronize()
        return DeviceTensor(ptr, tuple(shape), np.dtype(dtype))

    def get(self, t: DeviceTensor) -> np.ndarray:
        self.pyc.synchronize()
        out = np.empty(t.shape, t.dtype)
        self.pyc.memcpy_dtoh(out, t.ptr)
        return out

    def free(self) -> None:
        self.pyc.synchronize()
        for allocation in self.allocations:
            allocation.free()


@pytest.fixture
def dev():
    buffers = Buffers()
    yield buffers
    buffers.free()


@pytest.fixture
def stream():
    from onnxopt.runtime.cuda import pycuda_backend as pyc

    s = pyc.driver().Stream()
    yield s.handle
    s.synchronize()


def rand(shape, dtype):
    return RNG.standard_normal(shape).astype(np.float32).astype(DTYPES[dtype])


def close(got, want, dtype):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.isfinite(got).all(), "unwritten (poisoned) or non-finite outputs"
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-6)
    assert err < TOL[dtype], err


@pytest.mark.parametrize("dtype, d", [("float16", 64), ("bfloat16", 128), ("float32", 64),
                                      ("float16", 80), ("bfloat16", 256), ("float32", 96)])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_against_cpu_kernel(dev, stream, dtype, d, causal):
    b, h, hkv, s = 3, 8, 2, 77  # not a multiple of any tile
    q, k, v = rand((b, h, s, d), dtype), rand((b, hkv, s, d), dtype), rand((b, hkv, s, d), dtype)
    start = np.array([0, 10, 0], np.int32)  # row 1 padded on the left
    end = np.array([77, 77, 40], np.int32)  # row 2 on the right
    bias = rand((1, h, 1, s), dtype)  # ALiBi-like
    offset = np.array([0, 5, 76], np.int32)
    out = dev.poisoned(q.shape, q.dtype)
    attn_ops.attention_cuda(KernelContext(stream), dev.put(q), dev.put(k), dev.put(v),
                            dev.put(bias), dev.put(start), dev.put(end), dev.put(offset),
                            out=out, scale=d ** -0.5, causal=causal)
    want = attn_ops.attention_cpu(q, k, v, bias, start, end, offset, scale=d ** -0.5,
                                  causal=causal)
    got = dev.get(out)
    seen = np.any(want != 0, axis=-1)  # rows with no visible key are 0 in both
    close(got[seen], want[seen], dtype)
    assert (np.asarray(got, np.float64)[~seen] == 0).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_norms_and_activations_against_cpu_kernels(dev, stream, dtype):
    ctx = KernelContext(stream)
    x, r = rand((5, 3, 768), dtype), rand((5, 3, 768), dtype)
    g, b = rand((768,), dtype), rand((768,), dtype)
    y, s = dev.poisoned(x.shape, x.dtype), dev.poisoned(x.shape, x.dtype)
    norm_ops.layer_norm_cuda(ctx, dev.put(x), dev.put(g), dev.put(b), dev.put(r), out=(y, s),
                             epsilon=1e-5)
    want_y, want_s = norm_ops.layer_norm_cpu(x, g, b, r, epsilon=1e-5)
    close(dev.get(y), want_y, dtype)
    close(dev.get(s), want_s, dtype)
    y2 = dev.poisoned(x.shape, x.dtype)
    norm_ops.rms_norm_cuda(ctx, dev.put(x), dev.put(g), out=(y2, None), epsilon=1e-6)
    close(dev.get(y2), norm_ops.rms_norm_cpu(x, g, epsilon=1e-6)[0], dtype)
    for approximate in ("none", "tanh"):
        y3 = dev.poisoned(x.shape, x.dtype)
        act_ops.bias_gelu_cuda(ctx, dev.put(x), dev.put(g), out=y3, approximate=approximate)
        close(dev.get(y3), act_ops.bias_gelu_cpu(x, g, approximate=approximate), dtype)
    y4 = dev.poisoned(x.shape, x.dtype)
    act_ops.swiglu_cuda(ctx, dev.put(x), dev.put(r), out=y4)
    close(dev.get(y4), act_ops.swiglu_cpu(x, r), dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape, groups", [((2, 64, 16, 16), 32), ((1, 320, 64, 64), 32),
                                           ((3, 12, 7, 7), 4), ((4, 24), 6)],
                         ids=["registers", "streamed", "scalar", "rank2"])
@pytest.mark.parametrize("weights, activation", [("gamma+beta", "silu"), ("none", ""),
                                                 ("beta", "silu")])
def test_group_norm_against_cpu_kernel(dev, stream, dtype, shape, groups, weights, activation):
    x = (rand(shape, dtype).astype(np.float32) * 2 + 3).astype(DTYPES[dtype])
    g = rand((shape[1],), dtype) if "gamma" in weights else None
    b = rand((shape[1],), dtype) if "beta" in weights else None
    y = dev.poisoned(x.shape, x.dtype)
    norm_ops.group_norm_cuda(KernelContext(stream), dev.put(x), None if g is None else dev.put(g),
                             None if b is None else dev.put(b), out=y, groups=groups,
                             epsilon=1e-5, activation=activation)
    close(dev.get(y), norm_ops.group_norm_cpu(x, g, b, groups=groups, epsilon=1e-5,
                                              activation=activation), dtype)


def test_staged_session_matches_reference_kernels(models_dir):
    staged = staged_registry()
    cases = [(attention_model(), lambda m: attention_feeds(m, 2, 45, pad=(0, 13)), "float16"),
             (attention_model(head_size=80, dtype="bfloat16"),
              lambda m: attention_feeds(m, 2, 33, pad=(0, 7)), "bfloat16")]
    gpt2 = onnx.load(str(models_dir / "gpt2.ts.onnx"))
    from onnxopt.verification.inputs import make_inputs

    cases.append((gpt2, lambda m: make_inputs(m, {"batch": 2, "other": 13}), "float32"))
    diffusion = onnx.load(str(models_dir / "diffusion.ts.onnx"))  # six GroupNorms
    cases.append((diffusion, lambda m: make_inputs(m, {"batch": 2}), "float32"))
    for model, make_feeds, dtype in cases:
        optimized = run_pipeline(model, OptimizeOptions(target="cuda")).proto
        feeds = make_feeds(model)
        TIMES.reset()
        (got,) = session(optimized, registry=staged).run(None, feeds)
        assert TIMES.calls > 0  # the CUDA kernels really ran
        (want,) = session(optimized, providers=["CPUExecutionProvider"]).run(None, feeds)
        close(got, want, dtype)


@pytest.mark.skipif(not cuda_available.available(),
                    reason=f"ORT's CUDA provider: {cuda_available.unavailable_reason()}")
def test_cuda_provider_with_io_binding_and_cuda_graph():
    import onnxruntime as ort

    from onnxopt.runtime.cuda import preload

    model = attention_model(padding=False)  # every input on the device: capturable
    optimized = run_pipeline(model, OptimizeOptions(target="cuda")).proto
    feeds = attention_feeds(model, 2, 64)
    (want,) = session(optimized, providers=["CPUExecutionProvider"]).run(None, feeds)
    (got,) = session(optimized, providers=["CUDAExecutionProvider"]).run(None, feeds)
    close(got, want, "float16")
    preload(("flash_attention",), ("float16",))  # module loads are not capturable
    sess = session(optimized, providers=[("CUDAExecutionProvider", {"enable_cuda_graph": "1"})])
    binding = sess.io_binding()
    on_device = {k: ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0) for k, v in feeds.items()}
    out = ort.OrtValue.ortvalue_from_shape_and_type(want.shape, np.float16, "cuda", 0)
    for name, value in on_device.items():
        binding.bind_ortvalue_input(name, value)
    binding.bind_ortvalue_output("o", out)
    for _ in range(3):  # warm-up, capture, replay
        sess.run_with_iobinding(binding)
    close(out.numpy(), want, "float16")
