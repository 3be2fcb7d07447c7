"""softmax(K·h)·V with one query vector  ->  ai.onnxopt.AttentionFused(h as [B, 1, D], K, V)

A recurrent decoder attends with its hidden state ``h`` ([B, D]) over the encoder's outputs
([B, S, D]) one step at a time (Luong's dot attention). Written with ``bmm``, as most
PyTorch decoders do, the scores are ``K·h`` — the keys first, ``h`` a column — squeezed to
[B, S], and the probabilities are unsqueezed to a row before they multiply V::

    Squeeze(MatMul(K, Unsqueeze(h, 2)), 2) → [·scale] → [+ mask] → Softmax(last)
        → Unsqueeze(1) → MatMul(·, V)

That is attention with one query and one head: ``K·h`` holds the same products as
``h·Kᵀ``. The fused op reads ``h`` as [B, 1, D] and a [B, S] mask as [B, 1, S]; its
output, [B, 1, Dv], is the root MatMul's. (The ``h·Kᵀ`` spelling is rule ``attention``'s.)
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.legality.predicates import not_scalar_constant
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops import AttentionAttrs, MaskKind
from onnxopt.refusal import Refusal
from onnxopt.rules.base import Rule
from onnxopt.rules.disentangled_attention import term_reading_v


def _axes(node) -> list[int] | None:
    """An Unsqueeze's or Squeeze's axes (the IR spells them as the second input)."""
    axes = node.inputs[1] if len(node.inputs) > 1 else None
    if axes is None or axes.const is None:
        return None
    return [int(a) for a in axes.const.numpy().reshape(-1)]


class SingleQueryAttention(Rule):
    """softmax(K·h)·V with one query vector  ->  ai.onnxopt.AttentionFused(h, K, V, mask)"""

    name = "single_query_attention"
    family = "attention"
    root = "MatMul"

    def pattern(self, p: Builder):
        h = p.var("h", dtype=FLOAT_TYPES, rank=2)
        column = p.Unsqueeze(h, p.const("h_axes"), name="h_unsqueeze")
        scores = p.Squeeze(p.MatMul(p.var("k", rank=3), column, name="qk"), p.const("s_axes"),
                           name="squeeze")
        scaled = p.optional(p.Mul(scores, p.const("scale"), name="scale_mul"), scores)
        masked = p.optional(p.Add(scaled, p.var("mask"), name="mask_add"), scaled)
        softmax = p.Softmax(masked, name="softmax", reads=("axis",))
        row = p.Unsqueeze(softmax, p.const("p_axes"), name="p_unsqueeze")
        return p.MatMul(row, p.var("v", rank=3), name="pv")

    def legal(self, m: Match, target) -> Refusal | None:
        h, k, v = m.h, m.k, m.v
        if any(x.shape is None for x in (h, k, v)):
            return Refusal("qkv_shapes_unknown", f"%{h.name}: shapes of h, K, V are not known",
                           f"%{h.name}")
        if any(n.sem.get("transpose_a") or n.sem.get("transpose_b") for n in (m.qk, m.pv)):
            return Refusal("q_or_p_transposed", f"{m.qk.name}: an operand is transposed inside "
                           "the MatMul; not one query's scores", m.qk.name)
        if _axes(m.h_unsqueeze) not in ([2], [-1]) or _axes(m.squeeze) not in ([2], [-1]):
            return Refusal("not_a_column", f"{m.qk.name}: h is not multiplied as a column "
                           "(Unsqueeze then Squeeze on its last axis)", m.qk.name)
        if _axes(m.p_unsqueeze) not in ([1], [-2]):
            return Refusal("not_a_row", f"{m.pv.name}: the probabilities are not multiplied as "
                           "a row (Unsqueeze on axis 1)", m.pv.name)
        if int(m.softmax.attr("axis", -1)) not in (1, -1):
            return Refusal("softmax_not_last_axis", f"{m.softmax.name}: softmax is not over "
                           "the keys", m.softmax.name)
        (b, d), (bk, s, dk), (bv, sv, _) = h.shape, k.shape, v.shape
        if not (sd.same(d, dk) and sd.same(b, bk) and sd.same(b, bv) and sd.same(s, sv)):
            return Refusal("qkv_shapes_differ", f"%{k.name}: h {list(h.shape)}, K "
                           f"{list(k.shape)} and V {list(v.shape)} are not [B, D], [B, S, D], "
                           "[B, S, Dv]", f"%{k.name}")
        if m.scale is not None and (reason := not_scalar_constant(m.scale, "attention scale")):
            return reason
        if m.mask is not None:
            reason = self._mask_legal(m.mask, m.softmax.outputs[0].shape)
            if reason or (reason := term_reading_v([m.mask], v)):
                return reason
        return None

    @staticmethod
    def _mask_legal(mask, scores) -> Refusal | None:
        at = f"%{mask.name}"
        if mask.dtype not in FLOAT_TYPES:
            return Refusal("mask_not_float", f"{at}: the attention mask is {mask.dtype}, not an "
                           "additive float mask", at)
        if mask.shape is None or scores is None or len(mask.shape) > 2:
            return Refusal("mask_shape_unknown", f"{at}: the mask's shape is not [B, S] or "
                           "less", at)
        full = sd.broadcast_shapes(mask.shape, scores)
        if full is None or any(not sd.same(a, c) for a, c in zip(full, scores)):
            return Refusal("mask_enlarges_scores", f"{at}: a mask of shape {list(mask.shape)} "
                           f"would enlarge scores {list(scores)}", at)
        return None

    def rewrite(self, b: NodeBuilder, m: Match, facts):
        query = b.op("Unsqueeze", m.h, b.const(np.array([1], np.int64), "axis"))
        query.dtype, query.shape = m.h.dtype, (m.h.shape[0], 1, m.h.shape[1])
        mask = m.mask
        if mask is not None and len(mask.shape) == 2:  # [B, S] -> [B, 1, S]
            row = b.op("Unsqueeze", mask, b.const(np.array([1], np.int64), "axis"))
            row.dtype, row.shape = mask.dtype, (mask.shape[0], 1, mask.shape[1])
            mask = row
        scale = float(m.scale.const.numpy().reshape(-1)[0]) if m.scale is not None else 1.0
        d = m.h.shape[1]
        attrs = AttentionAttrs(num_heads=1, kv_num_heads=1, scale=scale,
                               mask_kind=MaskKind.NONE if mask is None else MaskKind.ADDITIVE,
                               head_size=d if isinstance(d, int) else 0)
        return b.fused("AttentionFused", query, m.k, m.v, mask, attrs=attrs)

    def describe(self, m: Match, facts) -> str:
        parts = ["one query vector, 1 head"]
        if m.scale is not None:
            parts.append(f"scale {float(m.scale.const.numpy().reshape(-1)[0]):.4g}")
        parts.append("no mask" if m.mask is None else "mask additive")
        return ", ".join(parts)
