"""NumPy reference implementations of the kernels in ``kernels/``: the definition of semantics.

Each function computes in float64 from whatever it is given (so pass the inputs *after* rounding
them to the kernel's dtype to compare like with like) and returns float64. The CUDA kernels
must agree with these up to the rounding of their dtype; the tests hold them to that. These are
also what a machine without a GPU can run.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "attention",
    "attention_mask",
    "bfloat16_bits",
    "bias_gelu",
    "from_bfloat16_bits",
    "group_norm",
    "layer_norm",
    "rms_norm",
    "round_to",
    "swiglu",
    "swiglu_fused",
]


def attention_mask(
    sq: int,
    skv: int,
    *,
    causal: bool = False,
    kv_len: int | None = None,
    kv_start: int | None = None,
    causal_offset: int | None = None,
) -> np.ndarray:
    """Boolean [sq, skv] matrix, True where query i may attend to key j.

    Key range: keys j < kv_start or j >= kv_len (the range's end) are hidden, both clamped to
    [0, skv] (left and right padding). Causal: query i sees key j iff j <= i + off with
    off = causal_offset, or skv - sq when that is None (bottom-right: the last query row sees
    every key, the decoder-with-KV-cache convention).
    """
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    visible = np.ones((sq, skv), dtype=bool)
    start = 0 if kv_start is None else min(max(int(kv_start), 0), skv)
    end = skv if kv_len is None else min(max(int(kv_len), start), skv)
    visible &= (j >= start) & (j < end)
    if causal:
        off = skv - sq if causal_offset is None else int(causal_offset)
        visible &= j <= i + off
    return visible


BIAS_FLOOR = -1e30  # finite bias values below this are clamped (the kernel scales by log2(e))


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
) -> np.ndarray:
    """softmax(Q K^T * scale + bias + mask) V over BNSH tensors, in float64.

    q [B, H, Sq, D]; k, v [B, Hkv, Skv, D] with H % Hkv == 0 (grouped-query attention: query
    head h reads kv head h // (H // Hkv)). scale defaults to 1 / sqrt(D). Per batch row b:
    keys outside [kv_start[b], kv_lens[b]) are masked (left and right padding; either may be
    None); causal uses causal_offset[b] (None: bottom-right). bias: additive, broadcastable to
    [B, H, Sq, Skv]; -inf masks a key, finite values below -1e30 count as -1e30. A query row
    with no visible key, or only -inf logits, yields 0.
    """
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    b, h, sq, d = q.shape
    bk, hkv, skv, dk = k.shape
    if v.shape != k.shape or bk != b or dk != d:
        raise ValueError(f"shape mismatch: q {q.shape}, k {k.shape}, v {v.shape}")
    if h % hkv:
        raise ValueError(f"query heads {h} are not a multiple of kv heads {hkv}")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    group = h // hkv
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if bias is not None:
        extra = np.asarray(bias, dtype=np.float64)
        extra = np.where(extra == -np.inf, -np.inf, np.maximum(extra, BIAS_FLOOR))
        scores = scores + np.broadcast_to(extra, scores.shape)
    out = np.zeros((b, h, sq, d), dtype=np.float64)
    for bi in range(b):
        visible = attention_mask(
            sq, skv, causal=causal,
            kv_len=None if kv_lens is None else int(kv_lens[bi]),
            kv_start=None if kv_start is None else int(kv_start[bi]),
            causal_offset=None if causal_offset is None else int(causal_offset[bi]))
        s = np.where(visible, scores[bi], -np.inf)
        m = s.max(axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        p = np.where(s > -np.inf, np.exp(s - m), 0.0)
        denom = p.sum(axis=-1, keepdims=True)
        p = np.divide(p, denom, out=np.zeros_like(p), where=denom > 0)
        out[bi] = p @ v[bi]
    return out


def layer_norm(
    x: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    eps: float = 1e-5,
    residual: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """LayerNorm over the last axis of v = x + residual; returns (y, v).

    y = (v - mean) / sqrt(var + eps) * gamma + beta with the biased variance. The kernel rounds
    v to its dtype before normalising (as storing the sum would); pass a rounded residual sum
    here via ``x`` to mimic that exactly, or accept the difference within tolerance.
    """
    v = _add(x, residual)
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (v - mean) / np.sqrt(var + eps)
    return _affine(y, gamma, beta), v


def rms_norm(
    x: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    eps: float = 1e-6,
    residual: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """RMSNorm over the last axis of v = x + residual; returns (y, v).

    y = v / sqrt(mean(v^2) + eps) * gamma + beta (beta usually absent).
    """
    v = _add(x, residual)
    y = v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + eps)
    return _affine(y, gamma, beta), v


def group_norm(
    x: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    groups: int = 1,
    eps: float = 1e-5,
    activation: str = "",
) -> np.ndarray:
    """GroupNorm of x [N, C, *spatial] over ``groups`` groups of C / groups channels, then SiLU.

    Each (n, group) is normalised over its channels and all spatial positions with the biased
    variance; gamma/beta [C] scale and shift per channel (None: 1 / 0); activation "silu"
    applies y * sigmoid(y) after them, "" nothing.
    """
    v = np.asarray(x, dtype=np.float64)
    if v.ndim < 2:
        raise ValueError(f"x must be [N, C, ...], got shape {list(v.shape)}")
    n, c = v.shape[:2]
    if groups <= 0 or c % groups:
        raise ValueError(f"{c} channels do not split into {groups} groups")
    if activation not in ("", "silu"):
        raise ValueError(f"activation must be '' or 'silu', got {activation!r}")
    grouped = v.reshape(n, groups, c // groups * int(np.prod(v.shape[2:], dtype=np.int64)))
    mean = grouped.mean(axis=-1, keepdims=True)
    var = ((grouped - mean) ** 2).mean(axis=-1, keepdims=True)
    y = ((grouped - mean) / np.sqrt(var + eps)).reshape(v.shape)
    view = (c,) + (1,) * (v.ndim - 2)
    if gamma is not None:
        y = y * np.asarray(gamma, dtype=np.float64).reshape(view)
    if beta is not None:
        y = y + np.asarray(beta, dtype=np.float64).reshape(view)
    return y * _sigmoid(y) if activation == "silu" else y


def bias_gelu(
    x: np.ndarray, bias: np.ndarray | None = None, *, approximate: str = "none"
) -> np.ndarray:
    """GELU(x + bias); approximate="none" uses erf, "tanh" the tanh approximation."""
    t = _add(x, bias)
    if approximate == "tanh":
        return 0.5 * t * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * t**3)))
    if approximate != "none":
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * t * (1.0 + erf(t / math.sqrt(2.0)))


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """silu(gate) * up, silu(g) = g * sigmoid(g)."""
    g = np.asarray(gate, dtype=np.float64)
    u = np.asarray(up, dtype=np.float64)
    return g * _sigmoid(g) * u


def swiglu_fused(x: np.ndarray) -> np.ndarray:
    """SwiGLU of one tensor [..., 2N] split in halves along the last axis: gate first, up second."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    if n % 2:
        raise ValueError(f"last dimension {n} is odd; cannot split into gate and up halves")
    return swiglu(x[..., : n // 2], x[..., n // 2 :])


# --- dtype helpers (NumPy has no bfloat16) -----------------------------------------------------


def bfloat16_bits(a: np.ndarray) -> np.ndarray:
    """float array -> uint16 bfloat16 bit patterns, rounding to nearest even (NaN kept NaN)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), rounded).astype(np.uint16)


def from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(a: np.ndarray, dtype: str) -> np.ndarray:
    """Round to ``dtype`` ("float32", "float16" or "bfloat16") and return float64 values."""
    if dtype == "float32":
        return np.asarray(a, dtype=np.float32).astype(np.float64)
    if dtype == "float16":
        return np.asarray(a, dtype=np.float16).astype(np.float64)
    if dtype == "bfloat16":
        return from_bfloat16_bits(bfloat16_bits(a)).astype(np.float64)
    raise ValueError(f"unknown dtype {dtype!r}")


def _add(x: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x if y is None else x + np.asarray(y, dtype=np.float64)


def _affine(y: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None) -> np.ndarray:
    if gamma is not None:
        y = y * np.asarray(gamma, dtype=np.float64)
    if beta is not None:
        y = y + np.asarray(beta, dtype=np.float64)
    return y


def _sigmoid(g: np.ndarray) -> np.ndarray:
    # Split by sign so that exp never overflows.
    e = np.exp(-np.abs(g))
    return np.where(g >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
