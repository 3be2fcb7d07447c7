"""Every kernel against the float64 NumPy reference on a GPU: every attention specialisation at
two head sizes of its bucket, GroupNorm held in registers and streamed (with and without
gamma/beta/SiLU, ranks 2 to 5), every mask kind (left/right padding as key ranges, additive bias
with -inf, causal with Sq != Skv and with an explicit offset), ragged shapes (lengths that are
not multiples of the tile), GQA, fully masked rows, misaligned pointers (scalar fallbacks). Outputs are poisoned with NaN before each launch and followed by a
poisoned guard that must survive (no out-of-bounds writes)."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt import reference as ref
from onnxopt.runtime import cuda as k
from onnxopt.runtime.cuda import metadata
from onnxopt.runtime.cuda import pycuda_backend as pyc

pytestmark = pytest.mark.gpu

ESIZE = metadata.ELEM_BYTES
# Attention: max |err| (absolute; outputs are averages of N(0,1) values) and relative
# Frobenius error. fp16/bf16 bounds cover P rounded to the dtype for the PV product plus the
# output rounding; fp32 covers the SFU exp2.
ATT_TOL = {"float32": (2e-4, 2e-5), "float16": (6e-3, 2e-3), "bfloat16": (4e-2, 1.5e-2)}
# Elementwise / norm outputs: relative to max(1, max |ref|).
EW_TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def rel_error(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    diff = got - want
    max_abs = float(np.abs(diff).max()) if diff.size else 0.0
    fro = float(np.linalg.norm(diff) / max(np.linalg.norm(want), 1e-30))
    return max_abs, fro


def run_attention(dev, dtype, b, h, hkv, sq, skv, d, causal, *, start=None, end=None,
                  offset=None, bias_shape=None, tile=None, scale=None, q_scale=1.0, seed=0,
                  stream=0, window=0):
    rng = np.random.default_rng(seed)
    q = dev.to_host(rng.standard_normal((b, h, sq, d)) * q_scale, dtype)
    kk = dev.to_host(rng.standard_normal((b, hkv, skv, d)), dtype)
    v = dev.to_host(rng.standard_normal((b, hkv, skv, d)), dtype)
    rows = {name: None if x is None else np.array(x, dtype=np.int32)
            for name, x in (("start", start), ("end", end), ("offset", offset))}
    bias = None
    if bias_shape is not None:
        bias = rng.standard_normal(bias_shape) * 2
        bias.reshape(-1)[::5] = -np.inf  # masked keys inside the bias
        bias = dev.to_host(bias, dtype)
    out_bytes = b * h * sq * d * ESIZE[dtype]
    q_p, k_p, v_p = dev.upload(q), dev.upload(kk), dev.upload(v)
    o_p = dev.poisoned(out_bytes)
    ptrs = {name: 0 if x is None else dev.upload(x) for name, x in rows.items()}
    k.flash_attention(
        q_p, k_p, v_p, o_p, b, h, hkv, sq, skv, d, scale, causal, dtype, stream, tile=tile,
        bias_ptr=0 if bias is None else dev.upload(bias), bias_shape=bias_shape or (),
        kv_start_ptr=ptrs["start"], kv_end_ptr=ptrs["end"], causal_offset_ptr=ptrs["offset"],
        window=window)
    pyc.synchronize()
    assert dev.guard_intact(o_p, out_bytes), "write past the end of O"
    got = dev.from_host(dev.download(o_p, (b, h, sq, d), q.dtype), dtype)
    want = ref.attention(
        dev.from_host(q, dtype), dev.from_host(kk, dtype), dev.from_host(v, dtype),
        scale=scale, causal=causal, kv_start=rows["start"], kv_lens=rows["end"],
        causal_offset=rows["offset"], bias=None if bias is None else dev.from_host(bias, dtype),
        window=window)
    return got, want


# Every mask kind the kernel takes.
ATT_SHAPES = [
    # B, H, Hkv, Sq, Skv, causal, {start, end, offset, bias_shape}
    (1, 2, 2, 128, 128, False, {}),
    (2, 4, 2, 100, 100, True, {}),  # ragged, GQA
    (1, 2, 1, 37, 300, True, {}),  # Sq < Skv (bottom-right), MQA
    (1, 2, 2, 300, 37, True, {}),  # Sq > Skv: leading rows fully masked -> 0
    (3, 2, 2, 129, 200, False, {"end": [200, 65, 0]}),  # right padding, an empty row
    (2, 8, 2, 257, 257, True, {"end": [257, 100]}),  # causal + right padding + GQA
    (3, 4, 2, 70, 70, True, {"start": [0, 13, 69], "end": [70, 70, 70]}),  # left padding
    (2, 2, 2, 50, 90, False, {"start": [5, 40], "end": [77, 41]}),  # left and right
    (2, 4, 4, 33, 160, True, {"offset": [20, 150]}),  # causal offset (static KV cache)
    (2, 4, 2, 65, 65, False, {"bias_shape": (1, 4, 1, 65)}),  # ALiBi-like per head
    (2, 4, 2, 65, 97, True, {"bias_shape": (2, 1, 65, 97)}),  # per-row mask + causal
    (2, 2, 2, 40, 40, False, {"bias_shape": (2, 2, 40, 40), "start": [3, 0]}),
    (1, 1, 1, 1, 513, True, {}),  # one decode step
    (1, 2, 2, 1000, 1000, True, {}),
    (1, 2, 2, 64, 65, False, {}),  # one key in the last tile
]


def _head_sizes(v):
    """The bucket's own head size and one below it that still lands in the bucket."""
    lower = max((u["DMAX"] for u in metadata.variants("flash_attention")
                 if u["dtype"] == v["dtype"] and u["DMAX"] < v["DMAX"]), default=0)
    return sorted({v["DMAX"], max(lower + 8, v["DMAX"] - 16)})


ATT_VARIANTS = [
    pytest.param(v["dtype"], d, (v["BM"], v["BN"]), id=f"{v['entry']}-D{d}")
    for v in metadata.variants("flash_attention")
    for d in _head_sizes(v)
]


@pytest.mark.parametrize(("dtype", "d", "tile"), ATT_VARIANTS)
@pytest.mark.parametrize("shape", ATT_SHAPES,
                         ids=lambda s: "x".join(map(str, s[:5])) + f"-c{int(s[5])}-"
                         + "-".join(sorted(s[6])))
def test_flash_attention_matches_reference(dev, dtype, d, tile, shape):
    b, h, hkv, sq, skv, causal, masks = shape
    got, want = run_attention(dev, dtype, b, h, hkv, sq, skv, d, causal, tile=tile, **masks)
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} outputs never written or NaN"
    max_abs, fro = rel_error(got, want)
    tol_abs, tol_fro = ATT_TOL[dtype]
    assert max_abs <= tol_abs and fro <= tol_fro, (max_abs, fro)
    zero_rows = np.all(want == 0, axis=-1)
    assert np.all(got[zero_rows] == 0), "fully masked rows must be exactly 0"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_flash_attention_large_scores_and_custom_scale(dev, dtype):
    # Peaked softmax (scores in the hundreds): the online max must rescale correctly.
    got, want = run_attention(dev, dtype, 1, 2, 2, 200, 333, 64, True, scale=0.5, q_scale=4.0,
                              seed=3)
    max_abs, fro = rel_error(got, want)
    tol_abs, tol_fro = ATT_TOL[dtype]
    assert max_abs <= 2 * tol_abs and fro <= 2 * tol_fro, (max_abs, fro)


def test_flash_attention_is_deterministic_and_runs_on_a_stream(dev):
    stream = pyc.driver().Stream()
    a, _ = run_attention(dev, "bfloat16", 2, 4, 2, 300, 300, 128, True, end=[300, 111],
                         stream=stream.handle)
    b, _ = run_attention(dev, "bfloat16", 2, 4, 2, 300, 300, 128, True, end=[300, 111],
                         stream=stream.handle)
    np.testing.assert_array_equal(a, b)


def test_flash_attention_rejects_bad_arguments(dev):
    p = dev.poisoned(1 << 16)
    with pytest.raises(ValueError, match="multiple"):
        k.flash_attention(p, p, p, p, 1, 3, 2, 8, 8, 64, None, False, "float16", 0)
    with pytest.raises(ValueError, match="aligned"):
        k.flash_attention(p + 2, p, p, p, 1, 2, 2, 8, 8, 64, None, False, "float16", 0)
    with pytest.raises(ValueError, match="head size 84"):
        k.flash_attention(p, p, p, p, 1, 2, 2, 8, 8, 84, None, False, "float16", 0)


# --- LayerNorm / RMSNorm -----------------------------------------------------------------------


NORM_HIDDEN = [768, 1000, 1001, 4096, 5120, 8192]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("hidden", NORM_HIDDEN)
@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_norms_match_reference(dev, dtype, hidden, rms, residual):
    rows = 7
    rng = np.random.default_rng(hidden)
    x = dev.to_host(rng.standard_normal((rows, hidden)) * 2 + 3, dtype)
    r = dev.to_host(rng.standard_normal((rows, hidden)), dtype) if residual else None
    g = dev.to_host(rng.standard_normal(hidden), dtype)
    bt = dev.to_host(rng.standard_normal(hidden) * 0.1, dtype)
    nbytes = rows * hidden * ESIZE[dtype]
    x_p, g_p, b_p = dev.upload(x), dev.upload(g), dev.upload(bt)
    r_p = dev.upload(r) if residual else 0
    y_p = dev.poisoned(nbytes)
    s_p = dev.poisoned(nbytes) if residual else 0
    if rms:
        k.rms_norm(
            x_p,
            g_p,
            y_p,
            rows,
            hidden,
            1e-6,
            dtype,
            0,
            residual_ptr=r_p,
            sum_out_ptr=s_p,
            beta_ptr=b_p,
        )
    else:
        k.layer_norm(
            x_p, g_p, b_p, y_p, rows, hidden, 1e-5, dtype, 0, residual_ptr=r_p, sum_out_ptr=s_p
        )
    pyc.synchronize()
    assert dev.guard_intact(y_p, nbytes)
    # The kernel normalises the sum rounded to dtype; so does this reference.
    v = (
        dev.from_host(x, dtype)
        if r is None
        else ref.round_to(dev.from_host(x, dtype) + dev.from_host(r, dtype), dtype)
    )
    fn = ref.rms_norm if rms else ref.layer_norm
    want, _ = fn(v, dev.from_host(g, dtype), dev.from_host(bt, dtype), eps=1e-6 if rms else 1e-5)
    got = dev.from_host(dev.download(y_p, (rows, hidden), x.dtype), dtype)
    assert not np.isnan(got).any()
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= EW_TOL[dtype], err
    if residual:
        assert dev.guard_intact(s_p, nbytes)
        got_sum = dev.from_host(dev.download(s_p, (rows, hidden), x.dtype), dtype)
        np.testing.assert_array_equal(got_sum, v)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_norm_misaligned_pointers_use_the_scalar_path(dev, dtype):
    rows, hidden = 5, 4096
    rng = np.random.default_rng(9)
    x = dev.to_host(rng.standard_normal((rows, hidden)), dtype)
    x_p = dev.upload(x, offset=2)
    y_p = dev.poisoned(rows * hidden * 2, offset=2)
    k.layer_norm(x_p, 0, 0, y_p, rows, hidden, 1e-5, dtype, 0)
    pyc.synchronize()
    want, _ = ref.layer_norm(dev.from_host(x, dtype))
    got = dev.from_host(dev.download(y_p, (rows, hidden), x.dtype), dtype)
    assert np.abs(got - want).max() <= EW_TOL[dtype] * max(1.0, np.abs(want).max())
    assert dev.guard_intact(y_p, rows * hidden * 2)


# --- GroupNorm -------------------------------------------------------------------------------------

# (shape, groups): the register-held group (vectorised and scalar), the streamed group
# (vectorised and scalar), rank 2 and rank 5, a group of exactly the register limit.
GROUP_NORM_SHAPES = [
    ((2, 64, 16, 16), 32),  # 2 channels x 256 per group
    ((1, 128, 64, 64), 32),  # 16384 per group: SD's 128-channel blocks
    ((1, 32, 64, 64), 4),  # 8 x 4096 = 32768 per group: the register limit (VEC 8 / 4)
    ((1, 320, 64, 64), 32),  # 40960 per group: streamed
    ((3, 12, 7, 7), 4),  # 49 positions: scalar, in registers
    ((1, 4, 99, 101), 1),  # 39996 per group, odd positions: scalar, streamed
    ((5, 16), 4),  # rank 2: one position per channel
    ((2, 32, 8, 4, 6), 8),  # rank 5
]
AFFINE = [("none", False), ("gamma+beta", True), ("gamma", False), ("beta", True)]


def run_group_norm(dev, dtype, shape, groups, affine="gamma+beta", silu=True, *, offset=0,
                   loc=3.0, scale=2.0, seed=0):
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = dev.to_host(rng.standard_normal(shape) * scale + loc, dtype)
    g = dev.to_host(rng.standard_normal(c), dtype) if "gamma" in affine else None
    bt = dev.to_host(rng.standard_normal(c) * 0.5, dtype) if "beta" in affine else None
    nbytes = x.size * ESIZE[dtype]
    x_p = dev.upload(x, offset=offset)
    g_p, b_p = (0 if t is None else dev.upload(t) for t in (g, bt))
    y_p = dev.poisoned(nbytes, offset=offset)
    spatial = int(np.prod(shape[2:], dtype=np.int64))
    activation = "silu" if silu else ""
    k.group_norm(x_p, g_p, b_p, y_p, shape[0], c, spatial, groups, 1e-5, activation, dtype, 0)
    pyc.synchronize()
    assert dev.guard_intact(y_p, nbytes), "write past the end of Y"
    want = ref.group_norm(dev.from_host(x, dtype),
                          None if g is None else dev.from_host(g, dtype),
                          None if bt is None else dev.from_host(bt, dtype),
                          groups=groups, eps=1e-5, activation=activation)
    got = dev.from_host(dev.download(y_p, shape, x.dtype), dtype)
    assert not np.isnan(got).any(), "an output element was never written"
    return got, want


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("shape", "groups"), GROUP_NORM_SHAPES)
@pytest.mark.parametrize(("affine", "silu"), AFFINE, ids=[f"{a}-{'silu' if s else 'plain'}"
                                                          for a, s in AFFINE])
def test_group_norm_matches_reference(dev, dtype, shape, groups, affine, silu):
    got, want = run_group_norm(dev, dtype, shape, groups, affine, silu, seed=sum(shape))
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= EW_TOL[dtype], err


@pytest.mark.parametrize(("shape", "groups"), [((2, 64, 16, 16), 32), ((1, 320, 64, 64), 32)],
                         ids=["registers", "streamed"])
def test_group_norm_statistics_survive_a_large_mean(dev, shape, groups):
    """x = 1000 + N(0, 1) in float32: E[x^2] - mean^2 would lose the variance to cancellation;
    the kernel's mean-then-centred-variance passes keep it."""
    got, want = run_group_norm(dev, "float32", shape, groups, "none", False, loc=1000.0,
                               scale=1.0)
    assert np.abs(got - want).max() <= 1e-3


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(("shape", "groups"), [((2, 64, 16, 16), 32), ((1, 320, 64, 64), 32)],
                         ids=["registers", "streamed"])
def test_group_norm_misaligned_pointers_use_the_scalar_path(dev, dtype, shape, groups):
    got, want = run_group_norm(dev, dtype, shape, groups, offset=2)
    assert np.abs(got - want).max() <= EW_TOL[dtype] * max(1.0, np.abs(want).max())


def test_group_norm_launch_errors(dev):
    p = dev.upload(np.zeros(64, np.float16))
    with pytest.raises(ValueError, match="6 channels do not split into 4 groups"):
        k.group_norm(p, 0, 0, p, 1, 6, 4, 4)
    with pytest.raises(ValueError, match="activation"):
        k.group_norm(p, 0, 0, p, 1, 8, 4, 4, activation="relu")
    k.group_norm(p, 0, 0, p, 0, 8, 4, 4)  # an empty batch launches nothing


# --- activations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("cols", [1024, 4100, 1001])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
def test_bias_gelu_matches_reference(dev, dtype, cols, approximate, with_bias):
    rows = 33
    rng = np.random.default_rng(cols)
    x = dev.to_host(rng.standard_normal((rows, cols)) * 3, dtype)
    bias = dev.to_host(rng.standard_normal(cols), dtype) if with_bias else None
    nbytes = rows * cols * ESIZE[dtype]
    x_p = dev.upload(x)
    b_p = dev.upload(bias) if with_bias else 0
    y_p = dev.poisoned(nbytes)
    k.bias_gelu(x_p, b_p, y_p, rows, cols, approximate, dtype, 0)
    pyc.synchronize()
    assert dev.guard_intact(y_p, nbytes)
    want = ref.bias_gelu(
        dev.from_host(x, dtype),
        None if bias is None else dev.from_host(bias, dtype),
        approximate=approximate,
    )
    got = dev.from_host(dev.download(y_p, (rows, cols), x.dtype), dtype)
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= EW_TOL[dtype], err


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("cols", [2048, 1000, 999])
@pytest.mark.parametrize("fused", [False, True], ids=["two_tensors", "split_halves"])
def test_swiglu_matches_reference(dev, dtype, cols, fused):
    rows = 17
    rng = np.random.default_rng(cols + fused)
    nbytes = rows * cols * ESIZE[dtype]
    y_p = dev.poisoned(nbytes)
    if fused:
        x = dev.to_host(rng.standard_normal((rows, 2 * cols)) * 3, dtype)
        k.swiglu_fused(dev.upload(x), y_p, rows, cols, dtype, 0)
        want = ref.swiglu_fused(dev.from_host(x, dtype))
    else:
        g = dev.to_host(rng.standard_normal((rows, cols)) * 3, dtype)
        u = dev.to_host(rng.standard_normal((rows, cols)), dtype)
        k.swiglu(dev.upload(g), dev.upload(u), y_p, rows, cols, dtype, 0)
        want = ref.swiglu(dev.from_host(g, dtype), dev.from_host(u, dtype))
    pyc.synchronize()
    assert dev.guard_intact(y_p, nbytes)
    got = dev.from_host(dev.download(y_p, (rows, cols), dev.HOST_DTYPE[dtype]), dtype)
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= EW_TOL[dtype], err


def test_preload_loads_every_variant_the_device_fits():
    from onnxopt.runtime.cuda import loader

    limits = loader.device_limits()
    n = k.preload()
    assert n == sum(1 for f in metadata.FAMILIES for v in metadata.variants(f)
                    if metadata.smem_bytes(f, v) <= limits.smem_optin)


# Bands (sliding-window and local attention): the kernel skips key tiles outside the band of a
# block's rows; windows narrower and wider than a tile, with padding, GQA, a cache's offset.
BAND_SHAPES = [
    # B, H, Hkv, Sq, Skv, causal, window, {start, end, offset}
    (1, 2, 2, 300, 300, True, 5, {}),
    (2, 4, 2, 513, 513, True, 100, {"end": [513, 400]}),
    (2, 4, 2, 257, 257, False, 3, {"start": [0, 20], "end": [257, 200]}),
    (1, 2, 1, 200, 200, False, 70, {}),
    (1, 2, 2, 40, 400, True, 64, {}),  # Sq < Skv: the band sits at the end of the keys
    (2, 2, 2, 129, 160, True, 1000, {"offset": [10, 140]}),  # wider than the keys: causal
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape", BAND_SHAPES, ids=lambda s: f"b{s[0]}h{s[1]}sq{s[3]}w{s[6]}")
def test_flash_attention_band_matches_reference(dev, dtype, shape):
    b, h, hkv, sq, skv, causal, window, rows = shape
    got, want = run_attention(dev, dtype, b, h, hkv, sq, skv, 64, causal, window=window, **rows)
    max_abs, fro = rel_error(got, want)
    assert max_abs < ATT_TOL[dtype][0] and fro < ATT_TOL[dtype][1], (max_abs, fro)
