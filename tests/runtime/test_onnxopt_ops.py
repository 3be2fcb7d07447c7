"""The ai.onnxopt.cuda ops through the bridge on the CPU provider (their NumPy reference
kernels): every mask the attention kernel takes (left and right padding as key ranges, an
additive bias, causal offsets), and what the CUDA kernels hand the launch wrappers (recorded,
since there is no GPU here)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnx
import onnx.parser
import pytest

from onnxopt import reference as ref
from onnxopt.runtime import REGISTRY, DeviceTensor, KernelContext, session
from onnxopt.runtime.ops import DOMAIN, DTYPES, OPS
from onnxopt.runtime.ops import activations as act_ops
from onnxopt.runtime.ops import attention as attn_ops
from onnxopt.runtime.ops import norms as norm_ops
from onnxopt.runtime.registry import CPU, CUDA
from onnxopt.runtime.session import kernels_for

RNG = np.random.default_rng(0)


def parse(text: str) -> onnx.ModelProto:
    header = f'<ir_version: 10, opset_import: ["": 21, "{DOMAIN}": 1]>\n'
    proto = onnx.parser.parse_model(header + text)
    proto.ir_version = 10
    return proto


def run(text: str, feeds: dict) -> list[np.ndarray]:
    return session(parse(text), providers=[CPU]).run(None, feeds)


def rand(*shape, dtype=np.float16):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


# --- declarations ----------------------------------------------------------------------------------


def test_every_op_has_a_cpu_and_a_cuda_kernel_per_dtype():
    specs = REGISTRY.kernels(DOMAIN)
    for op in OPS:
        for provider in (CPU, CUDA):
            dtypes = {s.inputs[0].dtype for s in specs if s.op_type == op and s.provider == provider}
            assert dtypes == set(DTYPES), (op, provider)
    for spec in specs:
        if spec.provider == CUDA:
            assert spec.shape is not None
    for s in specs:
        if s.op_type == "FlashAttention":
            names = [(p.name, p.dtype, p.optional) for p in s.inputs[3:]]
            assert names == [("bias", s.inputs[0].dtype, True), ("kv_start", "int32", True),
                             ("kv_end", "int32", True), ("causal_offset", "int32", True)]
            assert not any(p.on_cpu for p in s.inputs)  # every input stays on the device


def test_a_cpu_session_registers_only_cpu_kernels():
    model = parse("""g (float16[2,4] x, float16[2,4] y) => (float16[2,4] z) {
        z = ai.onnxopt.cuda.SwiGLU (x, y) }""")
    assert {k.provider for k in kernels_for(model, on_cuda=False)} == {CPU}
    assert {k.provider for k in kernels_for(model, on_cuda=True)} == {CPU, CUDA}


# --- attention -------------------------------------------------------------------------------------

ATTENTION = """
g ({t}[B,8,S,64] q, {t}[B,2,T,64] k, {t}[B,2,T,64] v, int32[B] start, int32[B] end)
  => ({t}[B,8,S,64] o) {{
  o = ai.onnxopt.cuda.FlashAttention <scale=0.125, causal={causal}> (q, k, v, , start, end)
}}"""


def padded(b, t, pads):
    mask = np.ones((b, t), np.int64)
    for row, n in enumerate(pads):
        if n:
            mask[row, t - n:] = 0
    return mask


@pytest.mark.parametrize("causal", [0, 1])
def test_flash_attention_cpu_kernel(causal):
    b, s, t = 2, 5, 9
    q, k, v = rand(b, 8, s, 64), rand(b, 2, t, 64), rand(b, 2, t, 64)
    start, end = np.array([0, 2], np.int32), np.array([9, 6], np.int32)  # right, left+right
    (o,) = run(ATTENTION.format(t="float16", causal=causal),
               {"q": q, "k": k, "v": v, "start": start, "end": end})
    want = ref.attention(q, k, v, scale=0.125, causal=bool(causal), kv_start=start,
                         kv_lens=end)
    assert o.dtype == np.float16
    np.testing.assert_allclose(o.astype(np.float64), want, atol=2e-3, rtol=2e-3)
    assert np.isfinite(o.astype(np.float32)).all()


def test_left_padding_runs_and_the_session_stays_usable():
    sess = session(parse(ATTENTION.format(t="float16", causal=1)), providers=[CPU])
    b, t = 2, 6
    feeds = {"q": rand(b, 8, 3, 64), "k": rand(b, 2, t, 64), "v": rand(b, 2, t, 64)}
    left = np.array([[1] * 6, [0, 0, 1, 1, 1, 1]], np.int64)
    start = left.argmax(axis=1).astype(np.int32)
    end = np.full(b, t, np.int32)
    (o,) = sess.run(None, {**feeds, "start": start, "end": end})
    want = ref.attention(*(feeds[n] for n in "qkv"), scale=0.125, causal=True,
                         kv_start=start, kv_lens=end)
    np.testing.assert_allclose(o.astype(np.float64), want, atol=2e-3, rtol=2e-3)
    with pytest.raises(Exception, match=r"kv_start must be \[2\]"):
        sess.run(None, {**feeds, "start": start[:1], "end": end})
    (again,) = sess.run(None, {**feeds, "start": start, "end": end})
    np.testing.assert_array_equal(again, o)


BIASED = """
g (float[2,4,5,32] q, float[2,2,9,32] k, float[2,2,9,32] v, float[{bias}] bias,
   int32[2] off) => (float[2,4,5,32] o) {{
  o = ai.onnxopt.cuda.FlashAttention <scale=0.2, causal={causal}> (q, k, v, bias, , , {off})
}}"""


@pytest.mark.parametrize("bias_shape", ["1,4,1,9", "2,1,5,9", "9", "2,4,5,9"])
@pytest.mark.parametrize("causal, off", [(0, ""), (1, ""), (1, "off")])
def test_additive_bias_and_causal_offset(bias_shape, causal, off):
    """ALiBi-like per-head biases, per-row masks with -inf and huge finite values, and a
    causal diagonal placed by a per-row offset (a key/value cache of fixed size)."""
    shape = tuple(int(d) for d in bias_shape.split(","))
    bias = RNG.standard_normal(shape).astype(np.float32) * 3
    bias.reshape(-1)[::7] = -np.inf
    bias.reshape(-1)[3::11] = np.finfo(np.float32).min
    q, k, v = rand(2, 4, 5, 32, dtype=np.float32), rand(2, 2, 9, 32, dtype=np.float32), \
        rand(2, 2, 9, 32, dtype=np.float32)
    offsets = np.array([1, 6], np.int32)
    text = BIASED.format(bias=bias_shape, causal=causal, off=off)
    if not off:
        text = text.replace("(q, k, v, bias, , , )", "(q, k, v, bias)")
    (o,) = run(text, {"q": q, "k": k, "v": v, "bias": bias, "off": offsets})
    want = ref.attention(q, k, v, scale=0.2, causal=bool(causal), bias=bias,
                         causal_offset=offsets if off else None)
    np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-6)
    assert np.isfinite(o).all()


def test_bfloat16_and_float32_attention_without_padding():
    text = """
    g (float[1,2,4,64] q, float[1,2,7,64] k, float[1,2,7,64] v) => (float[1,2,4,64] o, float[1,2,4,64] p) {
      qb = Cast<to=16>(q)
      kb = Cast<to=16>(k)
      vb = Cast<to=16>(v)
      ob = ai.onnxopt.cuda.FlashAttention <scale=0.125, causal=1> (qb, kb, vb)
      o = Cast<to=1>(ob)
      p = ai.onnxopt.cuda.FlashAttention <causal=1> (q, k, v)
    }"""
    q, k, v = (rand(1, 2, n, 64, dtype=np.float32) for n in (4, 7, 7))
    o, p = run(text, {"q": q, "k": k, "v": v})
    bf = [np.asarray(x.astype(ml_dtypes.bfloat16), np.float64) for x in (q, k, v)]
    np.testing.assert_allclose(o, ref.attention(*bf, scale=0.125, causal=True), atol=2e-2)
    # scale 0 (absent) is 1/sqrt(D), as in the kernel
    np.testing.assert_allclose(p, ref.attention(q, k, v, scale=1 / math.sqrt(64), causal=True),
                               rtol=1e-5, atol=1e-6)


def test_attention_shape_errors_are_sentences():
    with pytest.raises(ValueError, match="cannot share"):
        attn_ops.dims((1, 6, 4, 64), (1, 4, 4, 64), (1, 4, 4, 64))
    with pytest.raises(ValueError, match="one shape"):
        attn_ops.dims((2, 4, 4, 64), (2, 4, 4, 64), (2, 4, 5, 64))
    assert attn_ops.dims((3, 5, 64), (3, 7, 64), (3, 7, 64)) == (3, 1, 1, 5, 7, 64)


# --- norms and activations ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, onnx_type, tol", [(np.float16, "float16", 3e-3),
                                                   (np.float32, "float", 1e-5)])
def test_layer_norm_with_residual_and_sum(dtype, onnx_type, tol):
    text = f"""
    g ({onnx_type}[2,3,64] x, {onnx_type}[64] g, {onnx_type}[64] b, {onnx_type}[2,3,64] r)
      => ({onnx_type}[2,3,64] y, {onnx_type}[2,3,64] s, {onnx_type}[2,3,64] y2) {{
      y, s = ai.onnxopt.cuda.LayerNorm <epsilon=0.001> (x, g, b, r)
      y2 = ai.onnxopt.cuda.RMSNorm (x, g)
    }}"""
    x, g, b, r = rand(2, 3, 64, dtype=dtype), rand(64, dtype=dtype), rand(64, dtype=dtype), \
        rand(2, 3, 64, dtype=dtype)
    y, s, y2 = run(text, {"x": x, "g": g, "b": b, "r": r})
    total = (x.astype(np.float64) + r).astype(dtype)
    np.testing.assert_array_equal(s, total)
    want, _ = ref.layer_norm(total, g, b, eps=1e-3)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol)
    want2, _ = ref.rms_norm(x, g, eps=1e-6)
    np.testing.assert_allclose(y2.astype(np.float64), want2, rtol=tol, atol=tol)


GROUP_NORM = """
g ({t}[N,8,H,W] x, {t}[8] g, {t}[8] b) => ({t}[N,8,H,W] y, {t}[N,8,H,W] z, {t}[N,8,H,W] w) {{
  y = ai.onnxopt.cuda.GroupNorm <groups=4, epsilon=0.001, activation="silu"> (x, g, b)
  z = ai.onnxopt.cuda.GroupNorm <groups=2> (x)
  w = ai.onnxopt.cuda.GroupNorm <groups=8, activation=""> (x, , b)
}}"""


@pytest.mark.parametrize("dtype, onnx_type, tol", [(np.float16, "float16", 3e-3),
                                                   (np.float32, "float", 1e-5)])
def test_group_norm_cpu_kernel_is_the_fused_ops_definition(dtype, onnx_type, tol):
    """The custom op's CPU kernel, through ORT, computes GroupNormFused as onnxopt.ops
    defines it."""
    from onnxopt.ops.group_norm import reference_group_norm

    x = (rand(2, 8, 3, 5, dtype=np.float32) * 2 + 3).astype(dtype)
    g, b = rand(8, dtype=dtype), rand(8, dtype=dtype)
    y, z, w = run(GROUP_NORM.format(t=onnx_type), {"x": x, "g": g, "b": b})
    assert y.dtype == z.dtype == w.dtype == x.dtype
    f64 = {name: np.asarray(v, np.float64) for name, v in (("x", x), ("g", g), ("b", b))}
    for got, kw in ((y, {"gamma": f64["g"], "beta": f64["b"], "groups": 4, "epsilon": 1e-3,
                         "activation": "silu"}),
                    (z, {"groups": 2}),
                    (w, {"beta": f64["b"], "groups": 8})):
        want = reference_group_norm(f64["x"], **kw)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_group_norm_cpu_kernel_in_bfloat16():
    """(ORT's Python API takes no bfloat16 arrays: the kernel function itself.)"""
    from onnxopt.ops.group_norm import reference_group_norm

    x = (rand(3, 16, 7, dtype=np.float32) * 4 - 1).astype(ml_dtypes.bfloat16)
    g, b = rand(16, dtype=ml_dtypes.bfloat16), rand(16, dtype=ml_dtypes.bfloat16)
    y = norm_ops.group_norm_cpu(x, g, b, groups=8, epsilon=1e-5, activation="silu")
    assert y.dtype == ml_dtypes.bfloat16 and y.shape == x.shape
    want = reference_group_norm(*(np.asarray(t, np.float64) for t in (x, g, b)), groups=8,
                                activation="silu")
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-2, atol=2e-2)


def test_group_norm_shape_errors_are_ort_errors():
    text = """g (float[2,6,4] x, float[4] g) => (float[2,6,4] y) {
        y = ai.onnxopt.cuda.GroupNorm <groups=3> (x, g) }"""
    with pytest.raises(Exception, match=r"gamma must be \[6\], got \[4\]"):
        run(text, {"x": rand(2, 6, 4, dtype=np.float32), "g": rand(4, dtype=np.float32)})
    text = """g (float[2,6,4] x) => (float[2,6,4] y) {
        y = ai.onnxopt.cuda.GroupNorm <groups=4> (x) }"""
    with pytest.raises(Exception, match="6 channels do not split into 4 groups"):
        run(text, {"x": rand(2, 6, 4, dtype=np.float32)})


def test_bias_gelu_and_swiglu():
    text = """
    g (float16[4,32] x, float16[32] bias, float16[4,32] up) => (float16[4,32] a, float16[4,32] b, float16[4,32] c) {
      a = ai.onnxopt.cuda.BiasGelu <approximate="tanh"> (x, bias)
      b = ai.onnxopt.cuda.BiasGelu (x)
      c = ai.onnxopt.cuda.SwiGLU (x, up)
    }"""
    x, bias, up = rand(4, 32), rand(32), rand(4, 32)
    a, b, c = run(text, {"x": x, "bias": bias, "up": up})
    np.testing.assert_allclose(a, ref.bias_gelu(x, bias, approximate="tanh"), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(b, ref.bias_gelu(x), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(c, ref.swiglu(x, up), rtol=2e-3, atol=2e-3)


def test_shape_mismatch_is_an_ort_error():
    text = """g (float16[4,32] x, float16[16] bias) => (float16[4,32] y) {
        y = ai.onnxopt.cuda.BiasGelu (x, bias) }"""
    with pytest.raises(Exception, match=r"bias must be \[32\], got \[16\]"):
        run(text, {"x": rand(4, 32), "bias": rand(16)})


# --- the CUDA kernels' calls, recorded --------------------------------------------------------------


def device(shape, dtype=np.float16, ptr=0x1000):
    return DeviceTensor(ptr, tuple(shape), np.dtype(dtype))


def test_cuda_attention_launches_on_orts_stream_with_every_mask_input(monkeypatch):
    calls = []
    monkeypatch.setattr(attn_ops, "flash_attention", lambda *a, **k: calls.append((a, k)))
    q, k, v = device((2, 8, 5, 64), ptr=0x100), device((2, 2, 9, 64), ptr=0x200), \
        device((2, 2, 9, 64), ptr=0x300)
    bias, start = device((2, 1, 1, 9), ptr=0x380), device((2,), np.int32, ptr=0x400)
    end, off = device((2,), np.int32, ptr=0x440), device((2,), np.int32, ptr=0x480)
    out = device((2, 8, 5, 64), ptr=0x500)
    attn_ops.attention_cuda(KernelContext(0xABC), q, k, v, bias, start, end, off, out=out,
                            scale=0.125, causal=1)
    (args, kwargs), = calls
    assert args == (0x100, 0x200, 0x300, 0x500, 2, 8, 2, 5, 9, 64, 0.125, True, "float16",
                    0xABC)
    assert kwargs == {"bias_ptr": 0x380, "bias_shape": (2, 1, 1, 9), "kv_start_ptr": 0x400,
                      "kv_end_ptr": 0x440, "causal_offset_ptr": 0x480}
    with pytest.raises(ValueError, match=r"kv_end must be \[2\]"):
        attn_ops.attention_cuda(KernelContext(0xABC), q, k, v, None, None,
                                device((3,), np.int32), out=out, scale=0.125)
    assert len(calls) == 1


def test_cuda_norms_and_activations_pass_pointers_and_stream(monkeypatch):
    calls = {}
    for module, name in ((norm_ops, "layer_norm"), (norm_ops, "rms_norm"),
                         (norm_ops, "group_norm"), (act_ops, "bias_gelu"), (act_ops, "swiglu")):
        monkeypatch.setattr(module, name, lambda *a, _n=name, **k: calls.setdefault(_n, (a, k)))
    x, g, r = device((2, 3, 64), np.float32, 0x10), device((64,), np.float32, 0x20), \
        device((2, 3, 64), np.float32, 0x30)
    y, s = device((2, 3, 64), np.float32, 0x40), device((2, 3, 64), np.float32, 0x50)
    ctx = KernelContext(7)
    norm_ops.layer_norm_cuda(ctx, x, g, None, r, out=(y, s), epsilon=1e-3)
    assert calls["layer_norm"] == ((0x10, 0x20, 0, 0x40, 6, 64, 1e-3, "float32", 7),
                                   {"residual_ptr": 0x30, "sum_out_ptr": 0x50})
    norm_ops.rms_norm_cuda(ctx, x, g, out=(y, None), epsilon=1e-6)
    assert calls["rms_norm"] == ((0x10, 0x20, 0x40, 6, 64, 1e-6, "float32", 7),
                                 {"residual_ptr": 0, "sum_out_ptr": 0})
    xg, gg = device((2, 8, 4, 5), np.float32, 0x60), device((8,), np.float32, 0x70)
    yg = device((2, 8, 4, 5), np.float32, 0x80)
    norm_ops.group_norm_cuda(ctx, xg, gg, None, out=yg, groups=4, epsilon=1e-6,
                             activation="silu")
    assert calls["group_norm"] == ((0x60, 0x70, 0, 0x80, 2, 8, 20, 4, 1e-6, "silu", "float32",
                                    7), {})
    with pytest.raises(ValueError, match=r"beta must be \[8\], got \[64\]"):
        norm_ops.group_norm_cuda(ctx, xg, gg, g, out=yg, groups=4)
    act_ops.bias_gelu_cuda(ctx, x, g, out=y, approximate="tanh")
    assert calls["bias_gelu"] == ((0x10, 0x20, 0x40, 6, 64, "tanh", "float32", 7), {})
    act_ops.swiglu_cuda(ctx, x, r, out=y)
    assert calls["swiglu"] == ((0x10, 0x30, 0x40, 6, 64, "float32", 7), {})
    with pytest.raises(ValueError, match="S needs a residual"):
        norm_ops.layer_norm_cuda(ctx, x, g, out=(y, s))


# --- the staged path (CUDA kernels behind ORT's CPU provider), on a fake host "device" ----------


@pytest.fixture
def host_device(monkeypatch):
    """PyCUDA's memory calls on host memory, and launch wrappers that compute the reference
    on that memory: enough to run the staged path's copies and bookkeeping without a GPU."""
    import ctypes

    from onnxopt.runtime.cuda import loader, pycuda_backend
    from onnxopt.runtime.tensors import host_view

    buffers = {}

    def alloc(nbytes):
        buf = ctypes.create_string_buffer(max(int(nbytes), 1))
        buffers[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf)

    def htod(dst, host):
        ctypes.memmove(int(dst), np.ascontiguousarray(host).ctypes.data, host.nbytes)

    def dtoh(host, src):
        ctypes.memmove(host.ctypes.data, int(src), host.nbytes)

    monkeypatch.setattr(loader, "ensure_context", lambda: 1)
    monkeypatch.setattr(pycuda_backend, "mem_alloc", alloc)
    monkeypatch.setattr(pycuda_backend, "memcpy_htod", htod)
    monkeypatch.setattr(pycuda_backend, "memcpy_dtoh", dtoh)
    monkeypatch.setattr(pycuda_backend, "synchronize", lambda: None)

    def view(ptr, shape, dtype):
        return host_view(ptr, tuple(shape), np.dtype(dtype), True)

    def fake_norm(rms):
        def launch(x, gamma, *rest, **kw):
            beta, (y, rows, hidden, eps, dtype, _stream) = (0, rest) if rms else (rest[0], rest[1:])
            dt = np.dtype(dtype)
            xs = view(x, (rows, hidden), dt)
            res = view(kw["residual_ptr"], (rows, hidden), dt) if kw["residual_ptr"] else None
            g = view(gamma, (hidden,), dt) if gamma else None
            b = view(beta, (hidden,), dt) if beta else None
            total = norm_ops._sum(xs, res)
            y_ref = (ref.rms_norm(total, g, b, eps=eps) if rms
                     else ref.layer_norm(total, g, b, eps=eps))[0]
            view(y, (rows, hidden), dt)[...] = y_ref
            if kw["sum_out_ptr"]:
                view(kw["sum_out_ptr"], (rows, hidden), dt)[...] = total
        return launch

    def fake_group_norm(x, gamma, beta, y, batch, channels, spatial, groups, eps, activation,
                        dtype, stream):
        dt, shape = np.dtype(dtype), (batch, channels, spatial)
        g = view(gamma, (channels,), dt) if gamma else None
        b = view(beta, (channels,), dt) if beta else None
        view(y, shape, dt)[...] = ref.group_norm(view(x, shape, dt), g, b, groups=groups,
                                                 eps=eps, activation=activation)

    def fake_gelu(x, bias, y, rows, cols, approximate, dtype, stream):
        dt = np.dtype(dtype)
        b = view(bias, (cols,), dt) if bias else None
        view(y, (rows, cols), dt)[...] = ref.bias_gelu(view(x, (rows, cols), dt), b,
                                                       approximate=approximate)

    def fake_attention(q, k, v, o, b, h, hkv, sq, skv, d, scale, causal, dtype, stream, *,
                       bias_ptr, bias_shape, kv_start_ptr, kv_end_ptr, causal_offset_ptr):
        dt = np.dtype(dtype)

        def rows(ptr):
            return view(ptr, (b,), np.int32) if ptr else None

        bias = view(bias_ptr, bias_shape, dt) if bias_ptr else None
        view(o, (b, h, sq, d), dt)[...] = ref.attention(
            view(q, (b, h, sq, d), dt), view(k, (b, hkv, skv, d), dt),
            view(v, (b, hkv, skv, d), dt), scale=scale, causal=causal, bias=bias,
            kv_start=rows(kv_start_ptr), kv_lens=rows(kv_end_ptr),
            causal_offset=rows(causal_offset_ptr))

    monkeypatch.setattr(norm_ops, "layer_norm", fake_norm(False))
    monkeypatch.setattr(norm_ops, "rms_norm", fake_norm(True))
    monkeypatch.setattr(norm_ops, "group_norm", fake_group_norm)
    monkeypatch.setattr(act_ops, "bias_gelu", fake_gelu)
    monkeypatch.setattr(attn_ops, "flash_attention", fake_attention)
    return buffers


def test_staged_registry_runs_the_cuda_kernel_functions(host_device, models_dir):
    from onnxopt.options import OptimizeOptions
    from onnxopt.pipeline import run_pipeline
    from onnxopt.runtime.ops.examples import attention_feeds, attention_model
    from onnxopt.runtime.ops.staged import TIMES, staged_registry
    from onnxopt.verification.inputs import make_inputs

    staged = staged_registry()
    assert {s.provider for s in staged.kernels()} == {CPU}
    gpt2 = onnx.load(str(models_dir / "gpt2.ts.onnx"))
    diffusion = onnx.load(str(models_dir / "diffusion.ts.onnx"))  # GroupNorm
    attention = attention_model()
    for model, feeds in ((gpt2, make_inputs(gpt2, {"batch": 2, "other": 7})),
                         (diffusion, make_inputs(diffusion, {"batch": 2})),
                         (attention, attention_feeds(attention, 2, 19, pad=(0, 5)))):
        optimized = run_pipeline(model, OptimizeOptions(target="cuda")).proto
        TIMES.reset()
        (got,) = session(optimized, providers=[CPU], registry=staged).run(None, feeds)
        assert TIMES.calls == sum(n.domain == DOMAIN for n in optimized.graph.node)
        (want,) = session(optimized, providers=[CPU]).run(None, feeds)
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=1e-3, atol=1e-3)
    left = attention_feeds(attention, 2, 8)
    left["attention_mask"][1, :2] = 0  # left padding, and a hole
    left["attention_mask"][1, 5] = 0
    (got,) = session(optimized, providers=[CPU], registry=staged).run(None, left)
    (want,) = session(attention, providers=[CPU]).run(None, left)
    # Causal + left padding: queries 0 and 1 of row 1 see no key. The kernel defines such a
    # row as 0; the original's value there depends on its mask constant (-10000 here).
    assert (got[1, :, :2] == 0).all()
    np.testing.assert_allclose(got[:, :, 2:].astype(np.float32),
                               want[:, :, 2:].astype(np.float32), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got[0].astype(np.float32), want[0].astype(np.float32),
                               rtol=2e-3, atol=2e-3)
