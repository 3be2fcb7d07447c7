"""AttentionFused: scaled dot-product attention, any mask, grouped-query heads.

    O = softmax(Q·Kᵀ·scale + mask) · V

Inputs (layout ``BNSH``): Q ``[B, H, Sq, D]``, K ``[B, Hkv, Skv, D]``,
V ``[B, Hkv, Skv, Dv]`` with ``H % Hkv == 0`` (query head ``h`` reads kv head
``h // (H / Hkv)``); optional additive ``mask`` broadcastable to
``[B, H, Sq, Skv]``; optional ``key_padding_mask`` ``[B, Skv]`` (nonzero =
keep), the graph input the additive mask was proved to derive from. The
additive mask is always the exact function; ``causal`` and
``key_padding_mask`` describe what it contains, so a kernel that builds the
mask itself may drop it. Rank-3 inputs ``[X, S, D]`` are single-head.

``nan_to_zero``: rows whose every key is masked give 0 instead of NaN (what
PyTorch's SDPA export does with ``Where(IsNaN(p), 0, p)``).

Layouts: with ``layout="BSH"`` Q, K and V arrive as the projections' outputs
``[B, S, H*D]`` (the model's head split ``Reshape → Transpose`` absorbed); with
``output_layout="BSH"`` the output is ``[B, S, H*Dv]`` (the head merge
absorbed). ``head_size``/``v_head_size`` give D and Dv. With ``projections=1``
(only with ``layout="BSH"``) inputs 0–2 are the hidden states the Q/K/V
projections read, and ``q_weight, k_weight, v_weight`` (inputs 5–7, ``[hidden,
H*D]``) and optional ``q_bias, k_bias, v_bias`` (inputs 8–10) complete them:
``Q = x_q·Wq + bq`` — the whole block from hidden state to merged heads is one
node. :func:`to_bnsh` turns such a node back into the BNSH form for kernels
that only take that.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.ops.base import FusedOp


def decompose(b, node: Node):
    if node.attr("layout", "BNSH") != "BNSH" or node.attr("output_layout", "BNSH") != "BNSH":
        return _via_bnsh(b, node)
    q, k, v = node.inputs[:3]
    mask = node.input(3)
    heads = node.attr("num_heads", 0)
    kv_heads = node.attr("kv_num_heads", heads)
    scale = node.attr("scale", 1.0)
    grouped = q.rank == 4 and kv_heads and heads and kv_heads != heads
    if grouped:
        # [B, H, S, D] -> [B, Hkv, n_rep*S, D]: the n_rep query heads that share a kv head are
        # contiguous, so grouping them along the sequence axis needs no copy of K or V.
        q = b.op("Reshape", q, b.const(np.array([0, kv_heads, -1, 0], np.int64), "group"))
    scores = b.op("MatMul", q, k)
    scores.producer.sem["transpose_b"] = True
    if grouped:
        scores = b.op("Reshape", scores, b.const(np.array([0, heads, -1, 0], np.int64), "ungroup"))
    if scale != 1.0:
        scores = b.op("Mul", scores, b.const(np.array(scale, _np_dtype(node.inputs[0].dtype)),
                                             "scale"))
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


def to_bnsh(b, node: Node) -> Node:
    """An equivalent AttentionFused node in BNSH layouts, placed before ``node``.

    The inputs are split into heads (``Reshape [0, 0, H, D]`` + ``Transpose``); the
    returned node's output is BNSH. The caller merges it back when ``node`` had
    ``output_layout="BSH"`` (see :func:`merge_output`).
    """
    q, k, v = _projected(b, node) if node.attr("projections", 0) else node.inputs[:3]
    heads = node.attr("num_heads")
    kv_heads = node.attr("kv_num_heads", heads) or heads
    d = node.attr("head_size")
    dv = node.attr("v_head_size", 0) or d
    if node.attr("layout", "BNSH") == "BSH":
        q, k, v = (split_heads(b, x, h, size) for x, h, size in
                   ((q, heads, d), (k, kv_heads, d), (v, kv_heads, dv)))
    attrs = attributes_with(node, layout="BNSH", output_layout="BNSH", projections=0)
    out = b.fused("AttentionFused", q, k, v, *node.inputs[3:5], **attrs)
    out.dtype = q.dtype
    if q.shape is not None and v.shape is not None:
        out.shape = (q.shape[0], q.shape[1], q.shape[2], v.shape[3])
    return out.producer


def attributes_with(node: Node, **changes) -> dict:
    """The node's attributes as plain values, with ``changes`` applied (for a rewritten copy)."""
    attrs = {name: node.attr(name) for name in node.attrs}
    attrs.update(changes)
    return attrs


def merge_output(b, node: Node, out):
    """Merge a BNSH attention output into ``[B, S, H*Dv]`` when ``node`` wants that."""
    if node.attr("output_layout", "BNSH") != "BSH":
        return out
    heads = node.attr("num_heads")
    dv = node.attr("v_head_size", 0) or node.attr("head_size")
    t = b.op("Transpose", out, perm=[0, 2, 1, 3])
    merged = b.op("Reshape", t, b.const(np.array([0, 0, heads * dv], np.int64), "merge_heads"))
    if out.shape is not None:
        t.shape = (out.shape[0], out.shape[2], out.shape[1], out.shape[3])
        merged.shape = (out.shape[0], out.shape[2], heads * dv)
    t.dtype = merged.dtype = out.dtype
    return merged


def _projected(b, node: Node):
    """``x·W + b`` for Q, K and V from a node with absorbed projections."""
    out = []
    for i in range(3):
        x, w, bias = node.inputs[i], node.input(5 + i), node.input(8 + i)
        y = b.op("MatMul", x, w)
        y.dtype = x.dtype
        if x.shape is not None:
            y.shape = tuple(x.shape[:-1]) + (w.shape[-1],)
        if bias is not None:
            shape = y.shape
            y = b.op("Add", y, bias)
            y.dtype, y.shape = x.dtype, shape
        out.append(y)
    return out


def split_heads(b, x, heads: int, size: int):
    """``[B, S, H*D]`` → ``[B, H, S, D]`` (Reshape + Transpose), shapes annotated."""
    y = b.op("Reshape", x, b.const(np.array([0, 0, heads, size], np.int64), "split_heads"))
    t = b.op("Transpose", y, perm=[0, 2, 1, 3])
    if x.shape is not None and len(x.shape) == 3:
        y.shape = (x.shape[0], x.shape[1], heads, size)
        t.shape = (x.shape[0], heads, x.shape[1], size)
    y.dtype = t.dtype = x.dtype
    return t


def _via_bnsh(b, node: Node):
    inner = to_bnsh(b, node)  # projections, head split
    (out,) = decompose(b, inner)
    b.graph.replace_all_uses(inner.output, out)
    b.graph.remove(inner)
    return [merge_output(b, node, out)]


def _split_np(x, heads, size):
    return x.reshape(x.shape[0], x.shape[1], heads, size).transpose(0, 2, 1, 3)


def reference(q, k, v, mask=None, key_padding_mask=None, q_weight=None, k_weight=None,
              v_weight=None, q_bias=None, k_bias=None, v_bias=None, *, num_heads=0,
              kv_num_heads=0, scale=1.0, causal=0, nan_to_zero=0, layout="BNSH",
              output_layout="BNSH", head_size=0, v_head_size=0, projections=0, **_):
    """NumPy attention in float64 (the additive mask is the exact function)."""
    if projections:
        q, k, v = (np.asarray(x, np.float64) @ w + (0 if bias is None else bias)
                   for x, w, bias in ((q, q_weight, q_bias), (k, k_weight, k_bias),
                                      (v, v_weight, v_bias)))
    if layout == "BSH":
        dv = v_head_size or head_size
        q = _split_np(np.asarray(q), num_heads, head_size)
        k = _split_np(np.asarray(k), kv_num_heads or num_heads, head_size)
        v = _split_np(np.asarray(v), kv_num_heads or num_heads, dv)
    out = _reference_bnsh(q, k, v, mask, scale, nan_to_zero)
    if output_layout == "BSH":
        out = out.transpose(0, 2, 1, 3).reshape(out.shape[0], out.shape[2], -1)
    return out


def _reference_bnsh(q, k, v, mask, scale, nan_to_zero):
    q64, k64, v64 = (np.asarray(a, np.float64) for a in (q, k, v))
    if q64.ndim == 4 and k64.shape[1] != q64.shape[1]:
        rep = q64.shape[1] // k64.shape[1]
        k64 = np.repeat(k64, rep, axis=1)
        v64 = np.repeat(v64, rep, axis=1)
    scores = q64 @ np.swapaxes(k64, -1, -2) * scale
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
    inputs=("Q", "K", "V", "mask?", "key_padding_mask?", "q_weight?", "k_weight?", "v_weight?",
            "q_bias?", "k_bias?", "v_bias?"),
    outputs=("O",),
    attrs={"num_heads": 0, "kv_num_heads": 0, "scale": 1.0, "causal": 0, "mask_kind": "none",
           "layout": "BNSH", "output_layout": "BNSH", "nan_to_zero": 0, "head_size": 0,
           "v_head_size": 0, "projections": 0},
    decompose=decompose,
    reference=reference,
    doc=__doc__,
)
