"""libonnxopt_ops on ORT's CPU provider: every op, dtype and mask kind against the float64
references (onnxopt/reference/), through a plain InferenceSession that only
registers the library: the host implementations run the plan (shape checks, specialisation,
grid, packed arguments) the GPU gets."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

from onnxopt import reference as ref
from onnxopt.runtime import library
from onnxopt.runtime.ops import DOMAIN

RNG = np.random.default_rng(0)
CPU = ["CPUExecutionProvider"]


def parse(text: str) -> onnx.ModelProto:
    header = f'<ir_version: 10, opset_import: ["": 21, "{DOMAIN}": 1]>\n'
    proto = onnx.parser.parse_model(header + text)
    proto.ir_version = 10
    return proto


def plain_session(text: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.register_custom_ops_library(library.path())
    return ort.InferenceSession(parse(text).SerializeToString(), options, providers=CPU)


def run(text: str, feeds: dict) -> list[np.ndarray]:
    return plain_session(text).run(None, feeds)


def rand(*shape, dtype=np.float16):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


def close(got, want, tol):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


# --- attention: every mask kind --------------------------------------------------------------

KEY_RANGES = """
g ({t}[B,8,S,64] q, {t}[B,2,T,64] k, {t}[B,2,T,64] v, int32[B] start, int32[B] end)
  => ({t}[B,8,S,64] o) {{
  o = ai.onnxopt.cuda.FlashAttention <scale=0.125, causal={causal}> (q, k, v, , start, end)
}}"""


@pytest.mark.parametrize("causal", [0, 1])
def test_key_ranges_left_and_right_padding_with_gqa(causal):
    b, s, t = 3, 5, 9
    q, k, v = rand(b, 8, s, 64), rand(b, 2, t, 64), rand(b, 2, t, 64)
    start = np.array([0, 2, 0], np.int32)  # none, left, right padding
    end = np.array([9, 6, 4], np.int32)
    (o,) = run(KEY_RANGES.format(t="float16", causal=causal),
               {"q": q, "k": k, "v": v, "start": start, "end": end})
    want = ref.attention(q, k, v, scale=0.125, causal=bool(causal), kv_start=start,
                         kv_lens=end)
    assert o.dtype == np.float16
    close(o, want, 2e-3)


def test_a_row_that_sees_no_key_is_zero_and_the_session_stays_usable():
    sess = plain_session(KEY_RANGES.format(t="float", causal=1))
    b, t = 2, 6
    feeds = {"q": rand(b, 8, 3, 64, dtype=np.float32), "k": rand(b, 2, t, 64, dtype=np.float32),
             "v": rand(b, 2, t, 64, dtype=np.float32)}
    start, end = np.array([0, 5], np.int32), np.array([6, 6], np.int32)
    (o,) = sess.run(None, {**feeds, "start": start, "end": end})
    # row 1: keys 5.. only, causal offset 6 - 3 = 3: queries 0 and 1 see none
    assert (o[1, :, :2] == 0).all()
    close(o, ref.attention(*(feeds[n] for n in "qkv"), scale=0.125, causal=True,
                           kv_start=start, kv_lens=end), 1e-5)
    with pytest.raises(Exception, match=r"FlashAttention \(float32, CPUExecutionProvider\): "
                                        r"kv_start must be \[2\], got \[1\]"):
        sess.run(None, {**feeds, "start": start[:1], "end": end})
    (again,) = sess.run(None, {**feeds, "start": start, "end": end})
    np.testing.assert_array_equal(again, o)


BAND = """
g ({t}[B,8,S,64] q, {t}[B,2,T,64] k, {t}[B,2,T,64] v, int32[B] start, int32[B] end)
  => ({t}[B,8,S,64] o) {{
  o = ai.onnxopt.cuda.FlashAttention <scale=0.125, causal={causal}, window={window}>
      (q, k, v, , start, end)
}}"""


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("s, t, window", [(7, 7, 2), (40, 40, 9), (5, 12, 3), (6, 6, 50)])
def test_bands_with_key_ranges(causal, s, t, window):
    """Sliding-window (causal) and local (symmetric) bands, with left and right padding and
    a window wider than the keys (then only the diagonal and the ranges hide keys)."""
    b = 3
    q, k, v = (rand(b, 8, s, 64, dtype=np.float32), rand(b, 2, t, 64, dtype=np.float32),
               rand(b, 2, t, 64, dtype=np.float32))
    start = np.array([0, 2, 0], np.int32)
    end = np.array([t, t, t - 2], np.int32)
    (o,) = run(BAND.format(t="float", causal=causal, window=window),
               {"q": q, "k": k, "v": v, "start": start, "end": end})
    want = ref.attention(q, k, v, scale=0.125, causal=bool(causal), kv_start=start,
                         kv_lens=end, window=window)
    close(o, want, 1e-5)


BIASED = """
g (float[2,4,5,32] q, float[2,2,9,32] k, float[2,2,9,32] v, float[{bias}] bias,
   int32[2] off) => (float[2,4,5,32] o) {{
  o = ai.onnxopt.cuda.FlashAttention <scale=0.2, causal={causal}> ({inputs})
}}"""


@pytest.mark.parametrize("bias_shape", ["1,4,1,9", "2,1,5,9", "9", "2,4,5,9", "5,1"])
@pytest.mark.parametrize("causal, off", [(0, False), (1, False), (1, True)])
def test_additive_bias_and_causal_offset(bias_shape, causal, off):
    """ALiBi-like per-head biases, per-row masks with -inf and huge finite values, a bias
    broadcast along keys, and a causal diagonal placed by a per-row offset (a key/value
    cache)."""
    shape = tuple(int(d) for d in bias_shape.split(","))
    bias = RNG.standard_normal(shape).astype(np.float32) * 3
    bias.reshape(-1)[::7] = -np.inf
    bias.reshape(-1)[3::11] = np.finfo(np.float32).min
    q = rand(2, 4, 5, 32, dtype=np.float32)
    k, v = rand(2, 2, 9, 32, dtype=np.float32), rand(2, 2, 9, 32, dtype=np.float32)
    offsets = np.array([1, 6], np.int32)
    inputs = "q, k, v, bias, , , off" if off else "q, k, v, bias"
    (o,) = run(BIASED.format(bias=bias_shape, causal=causal, inputs=inputs),
               {"q": q, "k": k, "v": v, "bias": bias, "off": offsets})
    want = ref.attention(q, k, v, scale=0.2, causal=bool(causal), bias=bias,
                         causal_offset=offsets if off else None)
    close(o, want, 1e-5)
    assert np.isfinite(o).all()


@pytest.mark.parametrize("head", [8, 16, 40, 72, 136, 256])
def test_head_sizes_of_every_bucket_float32(head):
    q, k, v = rand(1, 2, 3, head, dtype=np.float32), rand(1, 1, 4, head, dtype=np.float32), \
        rand(1, 1, 4, head, dtype=np.float32)
    text = f"""g (float[1,2,3,{head}] q, float[1,1,4,{head}] k, float[1,1,4,{head}] v)
      => (float[1,2,3,{head}] o) {{ o = ai.onnxopt.cuda.FlashAttention <causal=1> (q, k, v) }}"""
    (o,) = run(text, {"q": q, "k": k, "v": v})
    close(o, ref.attention(q, k, v, scale=1 / math.sqrt(head), causal=True), 1e-5)


def test_bfloat16_rank3_and_default_scale():
    text = """
    g (float[2,4,64] q, float[2,7,64] k, float[2,7,64] v, float[2,4,7] m)
      => (float[2,4,64] o, float[2,4,64] p) {
      qb = Cast<to=16>(q)
      kb = Cast<to=16>(k)
      vb = Cast<to=16>(v)
      mb = Cast<to=16>(m)
      ob = ai.onnxopt.cuda.FlashAttention <scale=0.125, causal=1> (qb, kb, vb, mb)
      o = Cast<to=1>(ob)
      p = ai.onnxopt.cuda.FlashAttention <causal=0> (q, k, v)
    }"""
    q, k, v = (rand(2, n, 64, dtype=np.float32) for n in (4, 7, 7))
    m = rand(2, 4, 7, dtype=np.float32)
    o, p = run(text, {"q": q, "k": k, "v": v, "m": m})
    bf = [np.asarray(x.astype(ml_dtypes.bfloat16), np.float64)[:, None] for x in (q, k, v, m)]
    want = ref.attention(*bf[:3], scale=0.125, causal=True, bias=bf[3])[:, 0]
    close(o, want, 3e-2)
    # scale 0 (absent) is 1/sqrt(D), as in the kernel
    close(p, ref.attention(q[:, None], k[:, None], v[:, None], scale=1 / 8)[:, 0], 1e-5)


@pytest.mark.parametrize("shapes, message", [
    (((1, 6, 4, 64), (1, 4, 4, 64), (1, 4, 4, 64)), "6 query heads cannot share 4 key/value"),
    (((2, 4, 4, 64), (2, 4, 4, 64), (2, 4, 5, 64)), "must have one shape"),
    (((1, 2, 4, 12), (1, 2, 4, 12), (1, 2, 4, 12)), "head size 12 is not a multiple of 8 up to"),
])
def test_attention_shape_errors_are_sentences(shapes, message):
    text = """g (float[a,b,c,d] q, float[e,f,g,h] k, float[i,j,k2,l] v) => (float[a,b,c,d] o) {
      o = ai.onnxopt.cuda.FlashAttention (q, k, v) }"""
    feeds = {n: rand(*s, dtype=np.float32) for n, s in zip("qkv", shapes)}
    with pytest.raises(Exception, match=message):
        run(text, feeds)


# --- norms ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, onnx_type, tol", [(np.float16, "float16", 3e-3),
                                                   (np.float32, "float", 1e-5)])
@pytest.mark.parametrize("hidden", [64, 36, 4096])
def test_layer_norm_and_rms_norm_with_residual_and_sum(dtype, onnx_type, tol, hidden):
    t, h = onnx_type, hidden
    text = f"""
    g ({t}[2,3,{h}] x, {t}[{h}] g, {t}[{h}] b, {t}[2,3,{h}] r)
      => ({t}[2,3,{h}] y, {t}[2,3,{h}] s, {t}[2,3,{h}] y2, {t}[2,3,{h}] s2, {t}[2,3,{h}] y3) {{
      y, s = ai.onnxopt.cuda.LayerNorm <epsilon=0.001> (x, g, b, r)
      y2, s2 = ai.onnxopt.cuda.RMSNorm (x, g, r)
      y3 = ai.onnxopt.cuda.LayerNorm (x)
    }}"""
    x, g, b, r = rand(2, 3, h, dtype=dtype), rand(h, dtype=dtype), rand(h, dtype=dtype), \
        rand(2, 3, h, dtype=dtype)
    y, s, y2, s2, y3 = run(text, {"x": x, "g": g, "b": b, "r": r})
    total = (x.astype(np.float64) + r).astype(dtype)  # the sum, rounded as a tensor stores it
    np.testing.assert_array_equal(s, total)
    np.testing.assert_array_equal(s2, total)
    close(y, ref.layer_norm(total, g, b, eps=1e-3)[0], tol)
    close(y2, ref.rms_norm(total, g, eps=1e-6)[0], tol)
    close(y3, ref.layer_norm(x, eps=1e-5)[0], tol)


def test_norm_in_bfloat16():
    text = """g (float[3,256] x, float[256] g) => (float[3,256] y) {
      xb = Cast<to=16>(x)
      gb = Cast<to=16>(g)
      yb = ai.onnxopt.cuda.RMSNorm <epsilon=0.00001> (xb, gb)
      y = Cast<to=1>(yb) }"""
    x, g = rand(3, 256, dtype=np.float32), rand(256, dtype=np.float32)
    (y,) = run(text, {"x": x, "g": g})
    xb, gb = (np.asarray(a.astype(ml_dtypes.bfloat16), np.float64) for a in (x, g))
    close(y, ref.rms_norm(xb, gb, eps=1e-5)[0], 3e-2)


def test_norm_errors():
    text = """g (float[2,64] x, float[32] g) => (float[2,64] y) {
      y = ai.onnxopt.cuda.RMSNorm (x, g) }"""
    with pytest.raises(Exception, match=r"gamma must be \[64\], got \[32\]"):
        run(text, {"x": rand(2, 64, dtype=np.float32), "g": rand(32, dtype=np.float32)})
    text = """g (float[2,64] x, float[64] g) => (float[2,64] y, float[2,64] s) {
      y, s = ai.onnxopt.cuda.RMSNorm (x, g) }"""
    with pytest.raises(Exception, match="the sum output S needs a residual input"):
        run(text, {"x": rand(2, 64, dtype=np.float32), "g": rand(64, dtype=np.float32)})
    text = """g (float[2,40000] x) => (float[2,40000] y) {
      y = ai.onnxopt.cuda.LayerNorm (x) }"""
    with pytest.raises(Exception, match="hidden size 40000 is above the supported maximum"):
        run(text, {"x": rand(2, 40000, dtype=np.float32)})


GROUP_NORM = """
g ({t}[N,8,H,W] x, {t}[8] g, {t}[8] b) => ({t}[N,8,H,W] y, {t}[N,8,H,W] z, {t}[N,8,H,W] w) {{
  y = ai.onnxopt.cuda.GroupNorm <groups=4, epsilon=0.001, activation="silu"> (x, g, b)
  z = ai.onnxopt.cuda.GroupNorm <groups=2> (x)
  w = ai.onnxopt.cuda.GroupNorm <groups=8, activation=""> (x, , b)
}}"""


@pytest.mark.parametrize("dtype, onnx_type, tol", [(np.float16, "float16", 3e-3),
                                                   (np.float32, "float", 1e-5)])
@pytest.mark.parametrize("hw", [(3, 5), (64, 80)])  # the second streams (above 32768)
def test_group_norm_is_the_fused_ops_definition(dtype, onnx_type, tol, hw):
    from onnxopt.ops.group_norm import reference_group_norm

    x = (rand(2, 8, *hw, dtype=np.float32) * 2 + 3).astype(dtype)
    g, b = rand(8, dtype=dtype), rand(8, dtype=dtype)
    y, z, w = run(GROUP_NORM.format(t=onnx_type), {"x": x, "g": g, "b": b})
    assert y.dtype == z.dtype == w.dtype == x.dtype
    f64 = {name: np.asarray(v, np.float64) for name, v in (("x", x), ("g", g), ("b", b))}
    for got, kw in ((y, {"gamma": f64["g"], "beta": f64["b"], "groups": 4, "epsilon": 1e-3,
                         "activation": "silu"}),
                    (z, {"groups": 2}),
                    (w, {"beta": f64["b"], "groups": 8})):
        close(got, reference_group_norm(f64["x"], **kw), tol)


def test_group_norm_errors():
    text = """g (float[2,6,4] x, float[4] g) => (float[2,6,4] y) {
        y = ai.onnxopt.cuda.GroupNorm <groups=3> (x, g) }"""
    with pytest.raises(Exception, match=r"gamma must be \[6\], got \[4\]"):
        run(text, {"x": rand(2, 6, 4, dtype=np.float32), "g": rand(4, dtype=np.float32)})
    text = """g (float[2,6,4] x) => (float[2,6,4] y) {
        y = ai.onnxopt.cuda.GroupNorm <groups=4> (x) }"""
    with pytest.raises(Exception, match="6 channels do not split into 4 groups"):
        run(text, {"x": rand(2, 6, 4, dtype=np.float32)})


# --- activations -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cols", [32, 37, 4096])
def test_bias_gelu_and_swiglu(cols):
    text = f"""
    g (float16[4,{cols}] x, float16[{cols}] bias, float16[4,{cols}] up)
      => (float16[4,{cols}] a, float16[4,{cols}] b, float16[4,{cols}] c) {{
      a = ai.onnxopt.cuda.BiasGelu <approximate="tanh"> (x, bias)
      b = ai.onnxopt.cuda.BiasGelu (x)
      c = ai.onnxopt.cuda.SwiGLU (x, up)
    }}"""
    x, bias, up = rand(4, cols), rand(cols), rand(4, cols)
    a, b, c = run(text, {"x": x, "bias": bias, "up": up})
    close(a, ref.bias_gelu(x, bias, approximate="tanh"), 2e-3)
    close(b, ref.bias_gelu(x), 2e-3)
    close(c, ref.swiglu(x, up), 2e-3)


def test_activation_errors_and_attributes():
    text = """g (float16[4,32] x, float16[16] bias) => (float16[4,32] y) {
        y = ai.onnxopt.cuda.BiasGelu (x, bias) }"""
    with pytest.raises(Exception, match=r"BiasGelu \(float16, CPUExecutionProvider\): "
                                        r"bias must be \[32\], got \[16\]"):
        run(text, {"x": rand(4, 32), "bias": rand(16)})
    text = """g (float16[4,32] x) => (float16[4,32] y) {
        y = ai.onnxopt.cuda.BiasGelu <approximate="fast"> (x) }"""
    with pytest.raises(Exception, match="approximate must be 'none' or 'tanh', got 'fast'"):
        run(text, {"x": rand(4, 32)})
    text = """g (float16[4,32] x) => (float16[4,32] y) {
        y = ai.onnxopt.cuda.LayerNorm <epsilon=1> (x) }"""
    with pytest.raises(Exception, match=r"attribute 'epsilon' \(float\) cannot be read"):
        plain_session(text)


def test_empty_tensors_launch_nothing():
    text = """g (float[0,64] x, float[0,64] up) => (float[0,64] y, float[0,64] z) {
        y = ai.onnxopt.cuda.RMSNorm (x)
        z = ai.onnxopt.cuda.SwiGLU (x, up) }"""
    y, z = run(text, {"x": np.zeros((0, 64), np.float32), "up": np.zeros((0, 64), np.float32)})
    assert y.shape == z.shape == (0, 64)
