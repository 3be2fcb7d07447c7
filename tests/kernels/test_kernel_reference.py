"""The NumPy references (the definition of the kernels' semantics) against naive formulas, and a
NumPy replay of the attention kernel's block-level algorithm (tile ranges, tile skipping, mask
decisions, online softmax) against the reference. No GPU needed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxopt import reference as ref


def naive_attention(q, k, v, scale, causal, kv_lens):
    """softmax(QK^T * scale + mask) V one row at a time, the mask spelled out per element."""
    b, h, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    out = np.zeros((b, h, sq, d))
    for bi in range(b):
        n_valid = skv if kv_lens is None else min(max(int(kv_lens[bi]), 0), skv)
        for hi in range(h):
            kh = hi // (h // hkv)
            for i in range(sq):
                keys = [
                    j for j in range(skv) if j < n_valid and (not causal or j <= i + (skv - sq))
                ]
                if not keys:
                    continue  # fully masked row: 0
                s = np.array([q[bi, hi, i] @ k[bi, kh, j] * scale for j in keys])
                p = np.exp(s - s.max())
                p /= p.sum()
                out[bi, hi, i] = sum(pj * v[bi, kh, j] for pj, j in zip(p, keys))
    return out


CASES = [
    # B, H, Hkv, Sq, Skv, D, causal, kv_lens
    (1, 2, 2, 5, 5, 8, False, None),
    (2, 4, 2, 7, 7, 8, True, None),  # GQA, causal square
    (2, 4, 1, 3, 9, 4, True, None),  # MQA, causal Sq < Skv (bottom-right: decode with cache)
    (1, 2, 2, 9, 4, 4, True, None),  # causal Sq > Skv: first 5 rows see nothing -> 0
    (3, 2, 2, 6, 8, 4, False, [8, 3, 0]),  # padding, including an empty batch
    (3, 4, 2, 6, 8, 4, True, [5, 12, 1]),  # padding + causal, a length above Skv (clamped)
    (1, 1, 1, 1, 13, 16, True, None),  # single decode step sees every key
]


@pytest.mark.parametrize("case", CASES)
def test_reference_attention_matches_naive(case):
    b, h, hkv, sq, skv, d, causal, lens = case
    rng = np.random.default_rng(0)
    q = rng.standard_normal((b, h, sq, d))
    k = rng.standard_normal((b, hkv, skv, d))
    v = rng.standard_normal((b, hkv, skv, d))
    lens = None if lens is None else np.array(lens, dtype=np.int32)
    scale = 0.37
    got = ref.attention(q, k, v, scale=scale, causal=causal, kv_lens=lens)
    want = naive_attention(q, k, v, scale, causal, lens)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.isfinite(got).all()


def test_reference_attention_default_scale_and_zero_rows():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 1, 6, 16))
    k = rng.standard_normal((1, 1, 3, 16))
    v = rng.standard_normal((1, 1, 3, 16))
    got = ref.attention(q, k, v, causal=True)
    np.testing.assert_allclose(got, naive_attention(q, k, v, 0.25, True, None), atol=1e-12)
    assert (got[0, 0, :3] == 0).all()  # rows 0..2 see no key (Sq - Skv = 3)
    assert (got[0, 0, 3:] != 0).any()


def test_attention_mask_alignment():
    m = ref.attention_mask(2, 4, causal=True)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    m = ref.attention_mask(3, 3, causal=True, kv_len=2)
    assert m.tolist() == [[True, False, False], [True, True, False], [True, True, False]]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("sq, skv, window", [(9, 9, 2), (4, 11, 3), (6, 6, 40)])
def test_reference_band_is_an_additive_band_mask(causal, sq, skv, window):
    """``window`` hides the keys farther than it from the query's position (bottom-right):
    the same as the decomposition's additive band mask."""
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 2, sq, 8))
    k = rng.standard_normal((1, 2, skv, 8))
    v = rng.standard_normal((1, 2, skv, 8))
    pos = np.arange(sq)[:, None] + skv - sq
    j = np.arange(skv)[None, :]
    hidden = (j < pos - window) | ((j > pos) if causal else (j > pos + window))
    want = ref.attention(q, k, v, scale=0.3, bias=np.where(hidden, -np.inf, 0.0))
    got = ref.attention(q, k, v, scale=0.3, causal=causal, window=window)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert ref.attention_mask(3, 3, causal=True, window=1).tolist() == [
        [True, False, False], [True, True, False], [False, True, True]]


def test_reference_attention_rejects_bad_gqa():
    with pytest.raises(ValueError, match="multiple"):
        ref.attention(np.zeros((1, 3, 2, 4)), np.zeros((1, 2, 2, 4)), np.zeros((1, 2, 2, 4)))


# --- the kernel's algorithm, replayed block by block in NumPy ----------------------------------


def replay_flash_attention(q, k, v, scale, causal, kv_lens, bm, bn, *, kv_start=None,
                           causal_offset=None, bias=None, window=0):
    """Mirror of fa::tc_forward's control flow: per query tile, the key range [start, n_end),
    the tiles it skips, the tiles it masks, the bias (clamped, in the log2 domain) and the
    exp2-domain online softmax with the -inf guards. Each line corresponds to one in
    kernels/flash_attention.cu."""
    b_, h_, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    out = np.full(q.shape, np.nan)
    log2e = 1.4426950408889634
    full_bias = None if bias is None else np.broadcast_to(bias, (b_, h_, sq, skv))
    for b in range(b_):
        for h in range(h_):
            hk = h // (h_ // hkv)
            start = 0 if kv_start is None else min(max(int(kv_start[b]), 0), skv)
            end = skv if kv_lens is None else min(max(int(kv_lens[b]), start), skv)
            offset = skv - sq if causal_offset is None else int(causal_offset[b])
            for q_tile in range(math.ceil(sq / bm)):
                q0 = q_tile * bm
                q_rows = min(bm, sq - q0)
                n_begin, n_end = start, end  # Mask::block_keys
                if causal:
                    n_end = min(n_end, q0 + q_rows - 1 + offset + 1)
                if window > 0:
                    n_begin = max(n_begin, q0 + offset - window)
                    if not causal:
                        n_end = min(n_end, q0 + q_rows - 1 + offset + window + 1)
                n_tiles = (n_end - n_begin + bn - 1) // bn if n_end > n_begin else 0
                if n_tiles == 0:
                    out[b, h, q0 : q0 + q_rows] = 0.0
                    continue
                qt = np.zeros((bm, d))
                qt[:q_rows] = q[b, h, q0 : q0 + q_rows]
                o = np.zeros((bm, d))
                m_run = np.full(bm, -np.inf)
                l_run = np.zeros(bm)
                rows = q0 + np.arange(bm)
                for t in range(n_tiles):
                    n0 = n_begin + t * bn
                    valid = min(bn, end - n0)
                    assert valid >= 1
                    kt = np.zeros((bn, d))
                    vt = np.zeros((bn, d))
                    kt[:valid] = k[b, hk, n0 : n0 + valid]
                    vt[:valid] = v[b, hk, n0 : n0 + valid]
                    s = (qt @ kt.T) * (scale * log2e)
                    need_mask = (n0 + bn > end) or (causal and n0 + bn - 1 > q0 + offset) or (
                        window > 0 and (n0 < q0 + q_rows - 1 + offset - window or (
                            not causal and n0 + bn - 1 > q0 + offset + window)))
                    keys = n0 + np.arange(bn)
                    pos = rows[:, None] + offset
                    masked = (keys[None, :] >= end) | (causal & (keys[None, :] > pos))
                    if window > 0:
                        masked |= (keys[None, :] < pos - window) | (
                            (not causal) & (keys[None, :] > pos + window))
                    if need_mask:
                        s = np.where(masked, -np.inf, s)
                    else:
                        assert not masked[:q_rows].any(), "a tile judged mask-free has masked keys"
                    if full_bias is not None:
                        tile = np.full((bm, bn), 0.0)
                        r, c = min(q_rows, bm), min(valid, bn)
                        tile[:r, :c] = full_bias[b, h, q0 : q0 + r, n0 : n0 + c]
                        tile = np.where(tile == -np.inf, -np.inf, np.maximum(tile, -1e30)) * log2e
                        s = np.where(masked & need_mask, s, s + tile)
                    m_new = np.maximum(m_run, s.max(axis=1))
                    m_use = np.where(m_new == -np.inf, 0.0, m_new)
                    alpha = np.exp2(m_run - m_use)
                    m_run = m_new
                    p = np.exp2(s - m_use[:, None])
                    l_run = l_run * alpha + p.sum(axis=1)
                    o = o * alpha[:, None] + p @ vt
                inv = np.divide(1.0, l_run, out=np.zeros_like(l_run), where=l_run > 0)
                out[b, h, q0 : q0 + q_rows] = (o * inv[:, None])[:q_rows]
    return out


REPLAY_CASES = [
    # B, H, Hkv, Sq, Skv, D, causal, kv_lens, BM, BN, extra
    (1, 2, 1, 130, 130, 8, True, None, 64, 32, {}),
    (1, 2, 2, 70, 200, 8, True, None, 64, 32, {}),  # Sq < Skv, ragged both
    (1, 1, 1, 200, 70, 8, True, None, 64, 32, {}),  # Sq > Skv: leading tiles fully masked
    (2, 2, 2, 65, 65, 8, False, [65, 1], 32, 16, {}),
    (3, 4, 2, 50, 90, 8, True, [0, 37, 500], 16, 16, {}),
    (1, 1, 1, 1, 300, 8, True, None, 128, 64, {}),  # decode
    (1, 1, 1, 300, 1, 8, True, None, 128, 64, {}),
    (3, 2, 2, 40, 90, 8, True, [90, 90, 50], 16, 16, {"kv_start": [0, 33, 49]}),  # left pad
    (2, 2, 2, 33, 80, 8, True, None, 16, 32, {"causal_offset": [10, 79]}),  # static cache
    (2, 2, 1, 45, 70, 8, False, [70, 60], 16, 32,
     {"kv_start": [3, 0], "bias": (1, 2, 1, 70)}),  # ALiBi-like + ranges
    (2, 2, 2, 45, 45, 8, True, None, 32, 16, {"bias": (2, 1, 45, 45)}),
    # bands: tiles before (and, symmetric, after) the band of a block's rows are skipped
    (1, 2, 1, 130, 130, 8, True, None, 32, 16, {"window": 5}),
    (2, 2, 2, 100, 100, 8, True, [100, 60], 16, 16, {"window": 40, "kv_start": [0, 7]}),
    (1, 2, 2, 97, 97, 8, False, None, 32, 16, {"window": 3}),
    (2, 2, 2, 70, 120, 8, False, [120, 90], 16, 32, {"window": 20}),
    (1, 1, 1, 30, 200, 8, True, None, 16, 16, {"window": 17}),  # Sq < Skv
    (1, 1, 1, 60, 60, 8, True, None, 16, 16, {"window": 500}),  # wider than the keys
    (2, 2, 2, 33, 80, 8, True, None, 16, 32, {"causal_offset": [10, 79], "window": 9}),
]


@pytest.mark.parametrize("case", REPLAY_CASES)
def test_kernel_algorithm_replay_matches_reference(case):
    b, h, hkv, sq, skv, d, causal, lens, bm, bn, extra = case
    rng = np.random.default_rng(2)
    q = rng.standard_normal((b, h, sq, d)) * 2
    k = rng.standard_normal((b, hkv, skv, d))
    v = rng.standard_normal((b, hkv, skv, d))
    lens = None if lens is None else np.array(lens, dtype=np.int32)
    kw = {name: np.array(x, np.int32) for name, x in extra.items()
          if name not in ("bias", "window")}
    if "window" in extra:
        kw["window"] = extra["window"]
    if "bias" in extra:
        bias = rng.standard_normal(extra["bias"]) * 2
        bias.reshape(-1)[::6] = -np.inf
        bias.reshape(-1)[1::9] = -3e38
        kw["bias"] = bias
    got = replay_flash_attention(q, k, v, 0.3, causal, lens, bm, bn, **kw)
    want = ref.attention(q, k, v, scale=0.3, causal=causal, kv_lens=lens, **kw)
    assert not np.isnan(got).any(), "some output row was never written"
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# --- norms and activations ---------------------------------------------------------------------


def test_layer_norm_reference():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 33)) * 3 + 5
    r = rng.standard_normal((4, 33))
    g = rng.standard_normal(33)
    b = rng.standard_normal(33)
    y, s = ref.layer_norm(x, g, b, eps=1e-5, residual=r)
    np.testing.assert_array_equal(s, x + r)
    for i in range(4):
        row = x[i] + r[i]
        mu = sum(row) / len(row)
        var = sum((e - mu) ** 2 for e in row) / len(row)
        want = [(e - mu) / math.sqrt(var + 1e-5) * gg + bb for e, gg, bb in zip(row, g, b)]
        np.testing.assert_allclose(y[i], want, rtol=1e-12)


def test_rms_norm_reference():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 17))
    g = rng.standard_normal(17)
    y, s = ref.rms_norm(x, g, eps=1e-6)
    np.testing.assert_array_equal(s, x)
    for i in range(3):
        rms = math.sqrt(sum(e * e for e in x[i]) / 17 + 1e-6)
        np.testing.assert_allclose(y[i], x[i] / rms * g, rtol=1e-12)


@pytest.mark.parametrize("shape, groups", [((2, 6, 3, 5), 3), ((1, 4), 2), ((3, 8, 2, 2, 3), 1)])
@pytest.mark.parametrize("activation", ["", "silu"])
def test_group_norm_reference(shape, groups, activation):
    """Against the formula spelled out per (n, group), and against the fused op's own NumPy
    definition (onnxopt.ops.group_norm), which the custom op must implement."""
    from onnxopt.ops.group_norm import reference_group_norm

    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape) * 3 + 7
    c = shape[1]
    g, b = rng.standard_normal(c), rng.standard_normal(c)
    y = ref.group_norm(x, g, b, groups=groups, eps=1e-5, activation=activation)
    cg = c // groups
    for n in range(shape[0]):
        for grp in range(groups):
            block = x[n, grp * cg:(grp + 1) * cg]
            values = list(block.reshape(-1))
            mu = sum(values) / len(values)
            var = sum((e - mu) ** 2 for e in values) / len(values)
            for j in range(cg):
                ch = grp * cg + j
                want = (x[n, ch] - mu) / math.sqrt(var + 1e-5) * g[ch] + b[ch]
                if activation:
                    want = want / (1 + np.exp(-want))
                np.testing.assert_allclose(y[n, ch], want, rtol=1e-12, atol=1e-12)
    fused = reference_group_norm(x, g, b, groups=groups, epsilon=1e-5, activation=activation)
    np.testing.assert_allclose(y, fused, rtol=1e-12, atol=1e-12)
    plain = ref.group_norm(x, groups=groups)
    np.testing.assert_allclose(plain, reference_group_norm(x, groups=groups), rtol=1e-12,
                               atol=1e-12)


def replay_group_norm(x, gamma, beta, groups, eps, activation, dtype, ptr=0x1000):
    """kernels/group_norm.cu's indexing and arithmetic order in float32 NumPy: one block per
    (n, group) at offset block * Cg * S, thread t owning vectors t, t + threads, ..., each
    vector's channel from its first element; returns (y, how often each element was
    written)."""
    from onnxopt.runtime.cuda import norms

    n, c = x.shape[:2]
    spatial = int(np.prod(x.shape[2:], dtype=np.int64))
    cg = c // groups
    size = cg * spatial
    v, threads = norms.select_group_variant(dtype, size, spatial, ptr)
    vec, nvec = v["VEC"], size // v["VEC"]
    if v["MAXIT"]:
        assert -(-nvec // threads) <= v["MAXIT"]
    flat = np.asarray(x, np.float32).reshape(-1)
    out = np.full(flat.shape, np.nan, np.float32)
    written = np.zeros(flat.shape, np.int64)
    f32 = np.float32
    for block in range(n * groups):
        base, first = block * size, (block % groups) * cg
        vectors = flat[base:base + size].reshape(nvec, vec)
        total = sum(vectors[t::threads].sum(dtype=np.float32) for t in range(threads))
        mean = f32(total) * (f32(1) / f32(size))
        sq = sum(((vectors[t::threads] - mean) ** 2).sum(dtype=np.float32)
                 for t in range(threads))
        rstd = f32(1) / np.sqrt(f32(sq) * (f32(1) / f32(size)) + f32(eps))
        e = np.arange(nvec) * vec
        channel = first + e // spatial
        assert ((e + vec - 1) // spatial == e // spatial).all(), "a vector crosses a channel"
        scale = rstd * (np.ones(nvec, np.float32) if gamma is None else gamma[channel])
        shift = np.zeros(nvec, np.float32) if beta is None else beta[channel]
        y = (vectors - mean) * scale[:, None].astype(np.float32) + shift[:, None]
        if activation == "silu":
            y = y / (f32(1) + np.exp(-y))
        out[base:base + size] = y.reshape(-1)
        written[base:base + size] += 1
    return out.reshape(x.shape), written


@pytest.mark.parametrize("dtype, shape, groups, ptr, entry", [
    ("float16", (2, 16, 8, 8), 4, 0x1000, "gn_f16_v8"),
    ("float32", (1, 16, 64, 80), 2, 0x1000, "gn_f32_v4_stream"),  # 40960 per group
    ("float16", (1, 4, 99, 101), 1, 0x1000, "gn_f16_v1_stream"),  # odd positions
    ("bfloat16", (3, 6, 5), 3, 0x1002, "gn_bf16_v1"),  # misaligned
    ("float32", (4, 12), 6, 0x1000, "gn_f32_v1"),  # rank 2: one position per channel
])
def test_group_norm_kernel_replay(dtype, shape, groups, ptr, entry):
    from onnxopt.runtime.cuda import norms

    spatial = int(np.prod(shape[2:], dtype=np.int64))
    size = shape[1] // groups * spatial
    assert norms.select_group_variant(dtype, size, spatial, ptr)[0]["entry"] == entry
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape).astype(np.float32) * 2 + 3
    g, b = (rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2))
    got, written = replay_group_norm(x, g, b, groups, 1e-5, "silu", dtype, ptr)
    assert (written == 1).all(), "every element written exactly once"
    want = ref.group_norm(x, g, b, groups=groups, eps=1e-5, activation="silu")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_group_norm_reference_refuses_what_the_kernel_cannot_do():
    x = np.zeros((1, 6, 2))
    with pytest.raises(ValueError, match="6 channels do not split into 4 groups"):
        ref.group_norm(x, groups=4)
    with pytest.raises(ValueError, match="activation"):
        ref.group_norm(x, groups=2, activation="gelu")
    assert ref.group_norm(np.zeros((0, 6, 2)), groups=3).shape == (0, 6, 2)


def test_gelu_reference():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 4.0])
    bias = np.array([0.0, 0.0, 0.0, 0.5, 0.0, 0.0])
    y = ref.bias_gelu(x, bias)
    t = x + bias
    want = [0.5 * e * (1 + math.erf(e / math.sqrt(2))) for e in t]
    np.testing.assert_allclose(y, want, rtol=1e-14)
    assert y[4] == pytest.approx(0.8413447460685429)
    yt = ref.bias_gelu(x, approximate="tanh")
    np.testing.assert_allclose(yt, ref.bias_gelu(x), atol=1e-3)  # the approximation is close
    with pytest.raises(ValueError):
        ref.bias_gelu(x, approximate="fast")


def test_swiglu_reference():
    g = np.array([-100.0, -1.0, 0.0, 2.0, 100.0])
    u = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    want = [gg / (1 + math.exp(-gg)) * uu if gg > -50 else 0.0 for gg, uu in zip(g, u)]
    np.testing.assert_allclose(ref.swiglu(g, u), want, rtol=1e-14, atol=1e-30)
    x = np.concatenate([g, u])[None, :]
    np.testing.assert_array_equal(ref.swiglu_fused(x)[0], ref.swiglu(g, u))


def test_bfloat16_rounding():
    vals = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, 3.0e38, np.inf, np.nan], np.float32)
    bits = ref.bfloat16_bits(vals)
    assert bits[0] == 0x3F80
    assert bits[1] == 0x3F80  # tie rounds to even
    assert bits[2] == 0x3F82  # tie rounds to even (up)
    assert ref.from_bfloat16_bits(bits[3]) == -2.5
    assert bits[5] == 0x7F80
    assert np.isnan(ref.from_bfloat16_bits(bits[6]))
    np.testing.assert_allclose(ref.round_to(vals[:5], "bfloat16"), vals[:5], rtol=2**-8)
