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

``window``: when nonzero the mask was proved a band (``mask_kind`` has ``window``): query
``i`` (at position ``p = i + Skv − Sq``) sees only keys ``p − window ≤ j ≤ p`` when causal
(sliding-window attention: Mistral's ``sliding_window`` is ``window + 1``), ``|p − j| ≤
window`` when not (local attention). Like ``causal`` it describes the exact mask input: a
kernel may skip the keys outside the band, or build the band itself. A window as long as the
keys or longer hides nothing more: at such lengths the op is plain causal attention (or
unmasked), and every kernel's band arithmetic reduces to that (no special case).

``nan_to_zero``: rows whose every key is masked give 0 instead of NaN (what
PyTorch's SDPA export does with ``Where(IsNaN(p), 0, p)``).

``mask_fill``: the one value the mask was seen to hold wherever it masks, key padding
included (0: several values, or not known). A query that sees no key (left padding under a
causal mask) computes softmax over its whole row of ``score + fill``: with a fill so far below
every score that the sum rounds to the fill (the float32 minimum Hugging Face masks fill with),
every key weighs the same and the row is the mean of V; with ``-inf`` it is NaN. A kernel that
builds the mask itself must reproduce that.

Outputs: ``O`` ``[B, H, Sq, Dv]``, and optionally ``P`` ``[B, H, Sq, Skv]``, the probabilities
``softmax(softcap(Q·Kᵀ·scale) + mask)`` (NaN-guarded like ``O`` with ``nan_to_zero``), for a
model that also reads them outside the product with V: VITS's relative-value term, attention
weights returned. Only a kernel that computes P may bind a node whose P is read
(``Kernel.probabilities``; :func:`reads_probabilities`): the decomposition does; a streaming
kernel never holds P whole, and ONNX Runtime's attention ops do not return it.

Always BNSH: the layout a kernel wants is the kernel's concern, decided when
select binds it (``Kernel.layout``; select/layout.py reads through the model's
own head split and merge), never absorbed into the fused op and undone again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onnxopt import reference as ref
from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.ops.base import FusedAttrs, FusedOp, Port, optional
from onnxopt.ops.mask_kind import MaskKind


@dataclass(frozen=True, kw_only=True)
class AttentionAttrs(FusedAttrs):
    """``AttentionFused``'s attributes. ``kv_num_heads`` 0 means as many as ``num_heads``;
    ``head_size`` 0, not known statically; ``causal`` and ``mask_kind`` say what the mask input
    was proved to hold (it is exact either way)."""

    num_heads: int = 0
    kv_num_heads: int = 0
    scale: float = 1.0
    causal: bool = False
    mask_kind: MaskKind = MaskKind.NONE
    nan_to_zero: bool = False
    softcap: float = 0.0
    head_size: int = 0
    window: int = 0  # a band: keys at most this far from the query's position (0: no band)
    mask_fill: float = 0.0  # the one value the mask holds where it masks (0: not one, unknown)

    @property
    def kv_heads(self) -> int:
        """The number of key/value heads (``kv_num_heads``, or ``num_heads`` where it is 0)."""
        return self.kv_num_heads or self.num_heads

    @property
    def grouped_query(self) -> bool:
        """Query heads share key/value heads (grouped-query attention)."""
        return self.kv_heads != self.num_heads


def decompose(b, node: Node):
    attrs = AttentionAttrs.of(node)
    q, k, v = node.inputs[:3]
    mask = node.input(3)
    heads, kv_heads = attrs.num_heads, attrs.kv_heads
    grouped = q.rank == 4 and heads and attrs.grouped_query
    if grouped:
        # [B, H, S, D] -> [B, Hkv, n_rep*S, D]: the n_rep query heads that share a kv head are
        # contiguous, so grouping them along the sequence axis needs no copy of K or V.
        q = b.op("Reshape", q, b.const(np.array([0, kv_heads, -1, 0], np.int64), "group"))
    scores = b.op("MatMul", q, k)
    scores.producer.sem["transpose_b"] = True
    if grouped:
        scores = b.op("Reshape", scores, b.const(np.array([0, heads, -1, 0], np.int64), "ungroup"))
    scores = scaled_scores(b, node, attrs, scores)
    if mask is not None:
        scores = b.op("Add", scores, mask)
    probs = b.op("Softmax", scores, axis=-1)
    if attrs.nan_to_zero:
        zero = b.const(np.array(0, _np_dtype(node.inputs[0].dtype)), "zero")
        probs = b.op("Where", b.op("IsNaN", probs), zero, probs)
    p_out = probs  # [B, H, Sq, Skv]: the P output, for readers outside (unread, it is free)
    if grouped:
        probs = b.op("Reshape", probs, b.const(np.array([0, kv_heads, -1, 0], np.int64), "group"))
    out = b.op("MatMul", probs, v)
    if grouped:
        out = b.op("Reshape", out, b.const(np.array([0, heads, -1, 0], np.int64), "ungroup"))
    return [out, p_out]


def reads_probabilities(node: Node) -> bool:
    """Whether something reads ``node``'s P output (a reader, or a graph output): then only a
    kernel that computes P may bind it."""
    if len(node.outputs) < 2:
        return False
    p = node.outputs[1]
    return bool(p.num_uses or p.is_graph_output)


def scaled_scores(b, node: Node, attrs: AttentionAttrs, scores):
    """``scores·scale``, soft-capped where the node says so: ``cap·tanh(scores·scale / cap)``,
    spelled ``Mul(scale / cap) → Tanh → Mul(cap)`` as exporters write it (Gemma 2)."""
    dtype = _np_dtype(node.inputs[0].dtype)
    scale, cap = attrs.scale, attrs.softcap
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


def reference(q, k, v, mask=None, key_padding_mask=None, **attributes):
    """AttentionFused on arrays (attributes as keywords), in Q's dtype: the additive mask is
    the exact function, so ``causal``, ``window`` and the padding input change nothing here."""
    attrs = AttentionAttrs.from_attributes(attributes)
    out = ref.attention(q, k, v, bias=mask, scale=attrs.scale, softcap=attrs.softcap,
                        nan_to_zero=attrs.nan_to_zero, bias_floor=None)
    return out.astype(np.asarray(q).dtype)


def _np_dtype(dtype: str | None):
    return numpy_dtype(dtype or "float32")


ATTENTION = FusedOp(
    name="AttentionFused",
    inputs=(Port("Q"), Port("K"), Port("V"), optional("mask"), optional("key_padding_mask")),
    outputs=(Port("O"), optional("P")),
    attrs=AttentionAttrs,
    decompose=decompose,
    reference=reference,
    doc=__doc__,
)
