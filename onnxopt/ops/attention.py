"""AttentionFused: scaled dot-product attention, any mask, grouped-query heads.

    O = softmax(softcap(Q·Kᵀ·scale) + mask) · V

Inputs (layout ``BNSH``): Q ``[B, H, Sq, D]``, K ``[B, Hkv, Skv, D]``,
V ``[B, Hkv, Skv, Dv]`` with ``H % Hkv == 0`` (query head ``h`` reads kv head
``h // (H / Hkv)``); optional additive ``mask`` broadcastable to
``[B, H, Sq, Skv]``; optional ``key_padding_mask`` ``[B, Skv]`` (nonzero =
keep), the graph input the additive mask was proved to derive from. The
additive mask is always the exact function; ``causal`` and
``key_padding_mask`` describe what it contains, so a kernel that builds the
mask itself may drop it. Rank-3 inputs ``[X, S, D]`` are single-head.

``softcap``: when nonzero, the scaled scores are soft-capped before the mask,
``cap·tanh(scores / cap)`` (Gemma 2's attention logit soft-capping).

``nan_to_zero``: rows whose every key is masked give 0 instead of NaN (what
PyTorch's SDPA export does with ``Where(IsNaN(p), 0, p)``).

Always BNSH: the layout a kernel wants is the kernel's concern, decided when
select binds it (``Kernel.layout``; select/layout.py reads through the model's
own head split and merge), never absorbed into the fused op and undone again.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.ops.base import FusedOp


def decompose(b, node: Node):
    q, k, v = node.inputs[:3]
    mask = node.input(3)
    heads = node.attr("num_heads", 0)
    kv_heads = node.attr("kv_num_heads", heads)
    grouped = q.rank == 4 and kv_heads and heads and kv_heads != heads
    if grouped:
        # [B, H, S, D] -> [B, Hkv, n_rep*S, D]: the n_rep query heads that share a kv head are
        # contiguous, so grouping them along the sequence axis needs no copy of K or V.
        q = b.op("Reshape", q, b.const(np.array([0, kv_heads, -1, 0], np.int64), "group"))
    scores = b.op("MatMul", q, k)
    scores.producer.sem["transpose_b"] = True
    if grouped:
        scores = b.op("Reshape", scores, b.const(np.array([0, heads, -1, 0], np.int64), "ungroup"))
    scores = scaled_scores(b, node, scores)
    if mask is not None:
        scores = b.op("Add", scores, mask)
    probs = b.op("Softmax", scores, axis=-1)
    if node.attr("nan_to_zero", 0):
        zero = b.const(np.array(0, _np_dtype(node.inputs[0].dtype)), "zero")
        probs = b.op("Where", b.op("IsNaN", probs), zero, probs)
    if grouped:
        probs = b.op("Reshape", probs, b.const(np.array([0, kv_heads, -1, 0], np.int64), "group"))
    out = b.op("MatMul", probs, v)
    if grouped:
        out = b.op("Reshape", out, b.const(np.array([0, heads, -1, 0], np.int64), "ungroup"))
    return [out]


def scaled_scores(b, node: Node, scores):
    """``scores·scale``, soft-capped where the node says so: ``cap·tanh(scores·scale / cap)``,
    spelled ``Mul(scale / cap) → Tanh → Mul(cap)`` as exporters write it (Gemma 2)."""
    dtype = _np_dtype(node.inputs[0].dtype)
    scale, cap = float(node.attr("scale", 1.0)), float(node.attr("softcap", 0.0))
    if cap:
        scores = b.op("Tanh", b.op("Mul", scores, b.const(np.array(scale / cap, dtype),
                                                                 "scale")))
        return b.op("Mul", scores, b.const(np.array(cap, dtype), "softcap"))
    if scale != 1.0:
        scores = b.op("Mul", scores, b.const(np.array(scale, dtype), "scale"))
    return scores


def split_heads(b, x, heads: int, size: int):
    """``[B, S, H*D]`` → ``[B, H, S, D]`` (Reshape + Transpose), shapes annotated."""
    y = b.op("Reshape", x, b.const(np.array([0, 0, heads, size], np.int64), "split_heads"))
    t = b.op("Transpose", y, perm=[0, 2, 1, 3])
    if x.shape is not None and len(x.shape) == 3:
        y.shape = (x.shape[0], x.shape[1], heads, size)
        t.shape = (x.shape[0], heads, x.shape[1], size)
    y.dtype = t.dtype = x.dtype
    return t


def reference(q, k, v, mask=None, key_padding_mask=None, *, num_heads=0, kv_num_heads=0,
              scale=1.0, causal=0, nan_to_zero=0, head_size=0, softcap=0.0, **_):
    """NumPy attention in float64 (the additive mask is the exact function)."""
    q64, k64, v64 = (np.asarray(a, np.float64) for a in (q, k, v))
    if q64.ndim == 4 and k64.shape[1] != q64.shape[1]:
        rep = q64.shape[1] // k64.shape[1]
        k64 = np.repeat(k64, rep, axis=1)
        v64 = np.repeat(v64, rep, axis=1)
    scores = q64 @ np.swapaxes(k64, -1, -2) * scale
    if softcap:
        scores = softcap * np.tanh(scores / softcap)
    if mask is not None:
        scores = scores + np.asarray(mask, np.float64)
    top = np.max(scores, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(scores - top)
        p = e / e.sum(axis=-1, keepdims=True)
    if nan_to_zero:
        p = np.where(np.isnan(p), 0.0, p)
    return (p @ v64).astype(np.asarray(q).dtype)


def _np_dtype(dtype: str | None):

    return numpy_dtype(dtype or "float32")


ATTENTION = FusedOp(
    name="AttentionFused",
    inputs=("Q", "K", "V", "mask?", "key_padding_mask?"),
    outputs=("O",),
    attrs={"num_heads": 0, "kv_num_heads": 0, "scale": 1.0, "causal": 0, "mask_kind": "none",
           "nan_to_zero": 0, "head_size": 0, "softcap": 0.0},
    decompose=decompose,
    reference=reference,
    doc=__doc__,
)
