"""Scaled dot-product attention in float64: the fused op's definition and the CUDA kernel's.

One function serves both. The fused op (``AttentionFused``) carries its mask as an exact
additive ``bias``, may soft-cap the scores, and gives NaN for a row with no visible key unless
its ``nan_to_zero`` guard is set. The kernel (``FlashAttention``) also hides keys by per-row
ranges and a causal diagonal, clamps a finite bias below :data:`BIAS_FLOOR` (it scales the
scores by log2(e), where lower values would overflow), and always writes 0 for a row with no
visible key. The defaults here are the kernel's; the fused op's reference
(``onnxopt.ops.attention``) passes its own.
"""

from __future__ import annotations

import math

import numpy as np

BIAS_FLOOR = -1e30  # finite bias values below this are clamped (the kernel scales by log2(e))


def attention_mask(
    sq: int,
    skv: int,
    *,
    causal: bool = False,
    kv_len: int | None = None,
    kv_start: int | None = None,
    causal_offset: int | None = None,
    window: int = 0,
) -> np.ndarray:
    """Boolean [sq, skv] matrix, True where query i may attend to key j.

    Key range: keys j < kv_start or j >= kv_len (the range's end) are hidden, both clamped to
    [0, skv] (left and right padding). Causal: query i sees key j iff j <= i + off with
    off = causal_offset, or skv - sq when that is None (bottom-right: the last query row sees
    every key, the decoder-with-KV-cache convention). Band (``window`` > 0, sliding-window and
    local attention): query i also sees only keys with ``|i + off - j| <= window``, only those
    before it when causal.
    """
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    visible = np.ones((sq, skv), dtype=bool)
    start = 0 if kv_start is None else min(max(int(kv_start), 0), skv)
    end = skv if kv_len is None else min(max(int(kv_len), start), skv)
    visible &= (j >= start) & (j < end)
    off = skv - sq if causal_offset is None else int(causal_offset)
    if causal:
        visible &= j <= i + off
    if window > 0:
        visible &= (j >= i + off - window) & (j <= i + off + window)
    return visible


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
    causal: bool = False,
    kv_lens: np.ndarray | None = None,
    kv_start: np.ndarray | None = None,
    causal_offset: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    softcap: float = 0.0,
    nan_to_zero: bool = True,
    bias_floor: float | None = BIAS_FLOOR,
    window: int = 0,
) -> np.ndarray:
    """softmax(softcap(Q K^T * scale) + bias + key mask) V over BNSH tensors, in float64.

    q [B, H, Sq, D]; k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv] with H % Hkv == 0 (grouped-query
    attention: query head h reads kv head h // (H // Hkv)); rank-3 [B, S, D] inputs are one
    head. scale defaults to 1 / sqrt(D). ``softcap`` (nonzero) caps the scaled scores at
    ``cap·tanh(s / cap)`` before the bias. Per batch row b: keys outside [kv_start[b],
    kv_lens[b]) are hidden (left and right padding; either may be None); causal uses
    causal_offset[b] (None: bottom-right); ``window`` > 0 hides keys farther than that from
    the query's position (a band, :func:`attention_mask`). bias: additive, broadcastable to [B, H, Sq, Skv];
    -inf hides a key, finite values below ``bias_floor`` count as it (None: no floor). A query
    row with no visible key is NaN (0/0), or 0 with ``nan_to_zero``, which zeroes every NaN
    probability as the fused op's guard does.
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    if q.ndim == 3:  # one head: [B, S, D] as [B, 1, S, D]
        if bias is not None and np.ndim(bias) == 3:
            bias = np.asarray(bias)[:, None]
        return attention(q[:, None], k[:, None], v[:, None], scale=scale, causal=causal,
                         kv_lens=kv_lens, kv_start=kv_start, causal_offset=causal_offset,
                         bias=bias, softcap=softcap, nan_to_zero=nan_to_zero,
                         bias_floor=bias_floor, window=window)[:, 0]
    b, h, sq, d = q.shape
    _, hkv, skv, dk = k.shape
    if v.shape[:3] != k.shape[:3] or dk != d:
        raise ValueError(f"shape mismatch: q {q.shape}, k {k.shape}, v {v.shape}")
    if h % hkv:
        raise ValueError(f"query heads {h} are not a multiple of kv heads {hkv}")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    k = np.repeat(k, h // hkv, axis=1)
    v = np.repeat(v, h // hkv, axis=1)
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if softcap:
        scores = softcap * np.tanh(scores / softcap)
    if bias is not None:
        extra = np.asarray(bias, dtype=np.float64)
        if bias_floor is not None:
            extra = np.where(extra == -np.inf, -np.inf, np.maximum(extra, bias_floor))
        scores = scores + np.broadcast_to(extra, scores.shape)
    if (causal or window or kv_lens is not None or kv_start is not None
            or causal_offset is not None):
        visible = np.stack([attention_mask(
            sq, skv, causal=causal, window=window,
            kv_len=None if kv_lens is None else int(kv_lens[bi]),
            kv_start=None if kv_start is None else int(kv_start[bi]),
            causal_offset=None if causal_offset is None else int(causal_offset[bi]))
            for bi in range(b)])[:, None]
        scores = np.where(visible, scores, -np.inf)
    return _softmax(scores, nan_to_zero) @ v


def _softmax(scores: np.ndarray, nan_to_zero: bool) -> np.ndarray:
    """Softmax over the last axis; a row of -inf is 0/0 (NaN), a NaN score makes its row NaN."""
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(scores - top)
        p = e / e.sum(axis=-1, keepdims=True)
    return np.where(np.isnan(p), 0.0, p) if nan_to_zero else p
