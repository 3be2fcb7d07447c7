"""softmax(Q·Kᵀ·scale + mask)·V  ->  ai.onnxopt.AttentionFused(Q, K, V, mask)

After normalization every exporter's attention reads the same way: the scale
is one Mul after the QKᵀ MatMul (canonical_scale), K's transpose is the
MatMul's ``transpose_b`` flag (transpose_into_matmul), boolean masks are
additive (where_to_additive). What is left to recognise here:

- any number (0–2) of additive terms before the Softmax (mask, position bias);
- logit soft-capping before them, ``Tanh(scores·s) · cap`` (Gemma 2);
- SDPA's NaN guard ``Where(IsNaN(p), 0, p)`` after it;
- grouped-query heads: K and V repeated by ``Unsqueeze(axis 2) → Expand|Tile →
  Reshape``, absorbed so the fused op reads the un-repeated K/V.

Probabilities read by anything but P·V (VITS's relative-value term, the weights returned) are
the fused op's second output, ``P`` (:meth:`outside_use`, then ``legal`` names them in the
facts' ``outputs``): computed once, by a kernel that can write them (selection refuses the
others, ``probabilities_not_output``). Refused with a code of their own,
``probabilities_read_outside``, where what is read is not the P the fused op defines (the
softmax before SDPA's NaN guard), or where V is computed after them (the fused node takes
P's place in the graph, so V must come first).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.legality.mask import MaskInfo, classify_mask
from onnxopt.legality.predicates import (
    SHAPE_READERS,
    last_axis,
    not_scalar_constant,
    reduction_order,
    used_outside,
)
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops import AttentionAttrs, MaskKind
from onnxopt.refusal import Refusal
from onnxopt.rules.base import Facts, Rule
from onnxopt.rules.disentangled_attention import (
    MergedKey,
    key_input,
    key_view,
    merged_key,
    term_reading_v,
)

_VIEWS = frozenset({"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Flatten", "Identity"})


def _repeated(p: Builder, base: str):
    """K or V, possibly repeated over heads for grouped-query attention."""
    kv = p.var(base, rank=(3, 4))  # rank 3: single-head [X, S, D] views (the repeat needs 4)
    unsq = p.Unsqueeze(kv, p.const(), name=f"{base}_unsqueeze")
    rep = p.any(p.Expand(unsq, p.var(f"{base}_expand_shape"), name=f"{base}_expand"),
                p.Tile(unsq, p.var(f"{base}_tile_repeats"), name=f"{base}_expand"))
    # (allowzero: legality reads the Reshape's inferred output shape, which accounts for it)
    return p.any(p.Reshape(rep, p.var(f"{base}_repeat_shape"), name=f"{base}_repeat",
                           reads=("allowzero",)), kv)


def _through_views(node):
    """The op that computes with what ``node`` reads, past views that only reshape it (the
    reader a person looks for: the term's Pad or MatMul, not the Reshape before it)."""
    while node.op_type in _VIEWS and len(node.outputs) == 1:
        readers = [n for n, _ in node.output.uses() if n.op_type not in SHAPE_READERS]
        if len(readers) != 1:
            break
        node = readers[0]
    return node


def _probabilities(m: Match):
    """P: the softmax's output, past SDPA's NaN guard where there is one."""
    return m.softmax.output if m.nan_guard is None else m.nan_guard.output


def _read_outside(m: Match, value) -> bool:
    """Whether ``value`` is a graph output or read by a node outside the match (other than for
    its shape)."""
    inside = {id(n) for n in m.nodes}
    return value.is_graph_output or any(id(n) not in inside and n.op_type not in SHAPE_READERS
                                        for n, _ in value.uses())


def _produced_between(first, last, value) -> bool:
    """Whether ``value``'s producer sits after ``first`` and before ``last`` in the graph."""
    producer = value.producer
    if producer is None or producer.graph is not first.graph:
        return False
    after = False
    for node in first.graph:
        if node is first:
            after = True
        elif node is last:
            return False
        elif after and node is producer:
            return True
    return False


def _scalar(value) -> float:
    return float(np.asarray(value.const.numpy()).reshape(-1)[0])


@dataclass(frozen=True)
class AttentionFacts(Facts):
    mask_info: MaskInfo = field(default_factory=MaskInfo)  # what the probes proved
    merged_key: MergedKey | None = None  # K read through a merged-heads transpose (DeBERTa)


class Attention(Rule):
    """softmax(Q·Kᵀ·scale + mask)·V  ->  ai.onnxopt.AttentionFused(Q, K, V, mask)"""

    name = "attention"
    root = "MatMul"

    def begin(self, model) -> None:
        self.model = model
        self._masks: dict[int, MaskInfo] = {}

    def pattern(self, p: Builder):
        q = p.var("q", dtype=FLOAT_TYPES, rank=(3, 4))
        qk = p.MatMul(q, _repeated(p, "k"), name="qk")
        scaled = p.optional(p.Mul(qk, p.const("scale"), name="scale_mul"), qk)
        capped = p.optional(p.Mul(p.Tanh(scaled, name="softcap_tanh"), p.const("softcap"),
                                  name="softcap_mul"), scaled)
        biased = p.any(
            p.Add(p.Add(capped, p.var("mask")), p.var("bias"), name="mask_add2"),
            p.Add(capped, p.var("mask"), name="mask_add"),
            capped,
        )
        softmax = p.Softmax(biased, name="softmax", reads=("axis",))
        probs = p.optional(p.Where(p.IsNaN(softmax), p.const("zero", value=0.0), softmax,
                                   name="nan_guard"), softmax)
        return p.MatMul(probs, _repeated(p, "v"), name="pv")

    def legal(self, m: Match, target) -> Refusal | AttentionFacts:
        reason = last_axis(m.softmax, "softmax")
        if reason:
            return reason
        if m.scale is not None and (reason := not_scalar_constant(m.scale, "attention scale")):
            return reason
        if m.softcap is not None:
            if reason := not_scalar_constant(m.softcap, "soft-cap multiplier"):
                return reason
            if not 0 < _scalar(m.softcap) < float("inf"):
                return Refusal("softcap_not_positive", f"%{m.softcap.name}: the soft-cap "
                               f"multiplier is {_scalar(m.softcap):g}, not a positive cap",
                               f"%{m.softcap.name}")
        if m.qk.sem.get("transpose_a") or m.pv.sem.get("transpose_a") or m.pv.sem.get(
                "transpose_b"):
            return Refusal("q_or_p_transposed", f"{m.qk.name}: Q or P is transposed inside the "
                           "MatMul; not attention's form", m.qk.name)
        key = None if m.qk.sem.get("transpose_b") else merged_key(m.k, m.qk)
        if isinstance(key, Refusal):
            return key
        for name in ("k", "v"):
            if (reason := self._repeat_legal(m, name)):
                return reason
        k = m.k if key is None else key_view(key)
        if reason := (self._shapes_legal(m, k) or self._mask_legal(m)
                      or term_reading_v([m.mask, m.bias], m.v)):
            return reason
        verdict = self._mask_kind(m)
        if isinstance(verdict, Refusal):
            return verdict
        if key is not None:
            verdict = replace(verdict, merged_key=key)
        probs = _probabilities(m)
        if _read_outside(m, probs):
            if _produced_between(probs.producer, m.root, m.v):
                return Refusal("probabilities_read_outside", f"%{m.v.name}: V is computed "
                               f"after the attention probabilities %{probs.name}, which are "
                               "also read outside P·V: AttentionFused, which outputs them, "
                               "would have to come before V", f"%{m.v.name}")
            verdict = replace(verdict, outputs=(probs,))
        return reduction_order(target, "attention (streaming softmax)") or verdict

    def outside_use(self, m: Match, refusal: Refusal) -> Refusal | None:
        """The probabilities P read by something other than P·V (a relative-value term, as in
        VITS; the attention weights returned): AttentionFused outputs them too (``None``:
        ``legal`` decides). Refused where the value read is the softmax before SDPA's NaN guard,
        which the fused op does not output."""
        probs = _probabilities(m)
        if refusal.subject not in (f"%{m.softmax.output.name}", f"%{probs.name}"):
            return refusal
        other = used_outside(m.nodes, m.root, exposed=(probs,))
        if other is None or other.subject != f"%{m.softmax.output.name}":
            return other
        inside = {id(n) for n in m.nodes}
        readers = [n for n, _ in m.softmax.output.uses()
                   if id(n) not in inside and n.op_type not in SHAPE_READERS]
        reader = _through_views(readers[0]) if readers else None
        by = f"by {reader.name} ({reader.op_type})" if reader else "as a graph output"
        return Refusal("probabilities_read_outside", f"%{m.softmax.output.name}: the "
                       f"attention probabilities are read before the NaN guard {by}: "
                       "AttentionFused outputs them after it", f"%{m.softmax.output.name}")

    def _mask_kind(self, m: Match) -> Refusal | AttentionFacts:
        """Prove what the mask contains (causal, a band, key padding); refuse a fake causal
        mask, and a band the fused op cannot carry."""
        if m.mask is None or m.bias is not None:
            return AttentionFacts(mask_info=MaskInfo())
        info = self._masks.get(id(m.mask))
        if info is None:
            scores = m.qk.output.shape
            info = classify_mask(self.model, m.mask, scores[0], scores[-1], scores[-2])
            self._masks[id(m.mask)] = info
        if info.looks_causal and info.reason:
            return Refusal(info.reason.code, f"%{m.mask.name}: {info.reason.text}",
                           f"%{m.mask.name}")
        return AttentionFacts(mask_info=info)

    def _repeat_legal(self, m: Match, base: str) -> Refusal | None:
        repeat = getattr(m, f"{base}_repeat")
        if repeat is None:
            return None
        kv = getattr(m, base)
        axes = getattr(m, f"{base}_unsqueeze")
        # (the IR spells every opset's Unsqueeze with its axes as an input: the pattern's const)
        axes_val = axes.inputs[1].const.numpy().reshape(-1).tolist()
        out = repeat.output.shape
        expanded = getattr(m, f"{base}_expand").output.shape
        if axes_val not in ([2], [-3]):
            return Refusal("repeat_not_on_heads", f"{axes.name}: {base.upper()} is unsqueezed "
                           f"on axis {axes_val}, not 2: not a head repeat", axes.name)
        if (expanded is None or out is None or kv.shape is None or len(expanded) != 5
                or len(out) != 4 or len(kv.shape) != 4):
            return Refusal("repeat_unproven", f"{repeat.name}: cannot prove the repeat of "
                           f"{base.upper()} is over heads", repeat.name)
        b, hkv, s, d = kv.shape
        if not (sd.same(expanded[0], b) and sd.same(expanded[1], hkv) and sd.same(expanded[3], s)
                and sd.same(expanded[4], d)):
            return Refusal("repeat_expand_shape", f"{repeat.name}: {base.upper()} is expanded "
                           f"to {list(expanded)}, not [B, Hkv, n, S, D]", repeat.name)
        # (the key length is not compared: a Reshape keeps its element count, so with batch,
        # heads and head size proven it is K's own, whatever its name: merged decoders' no-past
        # branches reshape to the mask's total_sequence, equal to sequence there)
        if not (sd.same(out[1], sd.mul(hkv, expanded[2])) and sd.same(out[0], b)
                and sd.same(out[3], d)):
            return Refusal("repeat_reshape_shape", f"{repeat.name}: {base.upper()} reshaped to "
                           f"{list(out)}, not [B, Hkv*n, S, D]", repeat.name)
        return None

    def _shapes_legal(self, m: Match, k) -> Refusal | None:
        q, v = m.q, m.v
        if q.shape is None or k.shape is None or v.shape is None:
            return Refusal("qkv_shapes_unknown", f"%{q.name}: shapes of Q, K, V are not known",
                           f"%{q.name}")
        if not (q.rank == k.rank == v.rank):
            return Refusal("qkv_ranks_differ", f"%{q.name}: Q, K and V have ranks {q.rank}, "
                           f"{k.rank}, {v.rank}", f"%{q.name}")
        if q.shape[-1] is not None and k.shape[-1] is not None and not sd.same(q.shape[-1], k.shape[-1]):
            return Refusal("head_sizes_differ", f"%{k.name}: head size {k.shape[-1]} of K "
                           f"differs from Q's {q.shape[-1]}", f"%{k.name}")
        if not sd.same(k.shape[-2], v.shape[-2]) and None not in (k.shape[-2], v.shape[-2]):
            return Refusal("key_counts_differ", f"%{v.name}: V has {v.shape[-2]} keys, K has "
                           f"{k.shape[-2]}", f"%{v.name}")
        if q.rank == 4:
            h, hk, hv = q.shape[1], k.shape[1], v.shape[1]
            if not isinstance(h, int) or not isinstance(hk, int):
                return Refusal("heads_not_static", f"%{q.name}: the number of heads is not "
                               f"static ({h}, {hk})", f"%{q.name}")
            if not sd.same(hk, hv):
                return Refusal("kv_heads_differ", f"%{v.name}: V has {hv} heads, K has {hk}",
                               f"%{v.name}")
            if h % hk:
                return Refusal("heads_not_shared_evenly", f"%{k.name}: {h} query heads cannot "
                               f"share {hk} key/value heads", f"%{k.name}")
            if hk != h and m.k_repeat is None and not sd.same(q.shape[0], k.shape[0]):
                return Refusal("heads_without_repeat", f"%{k.name}: K has {hk} heads, Q {h}, "
                               "with no recognised head repeat", f"%{k.name}")
        return None

    def _mask_legal(self, m: Match) -> Refusal | None:
        scores = m.qk.output.shape
        for name in ("mask", "bias"):
            mask = getattr(m, name)
            if mask is None:
                continue
            at = f"%{mask.name}"
            if mask.dtype not in FLOAT_TYPES:
                return Refusal("mask_not_float", f"{at}: the attention mask is {mask.dtype}, "
                               "not an additive float mask", at)
            if mask.shape is None or scores is None:
                return Refusal("mask_shape_unknown", f"{at}: the mask's shape is unknown", at)
            if len(mask.shape) > len(scores):
                return Refusal("mask_rank_too_high", f"{at}: the mask has rank "
                               f"{len(mask.shape)} > the scores' {len(scores)}", at)
            full = sd.broadcast_shapes(mask.shape, scores)
            if full is None or any(not sd.same(a, b) and None not in (a, b)
                                   for a, b in zip(full, scores)):
                return Refusal("mask_enlarges_scores", f"{at}: a mask of shape "
                               f"{list(mask.shape)} would enlarge scores {list(scores)}", at)
        return None

    def rewrite(self, b: NodeBuilder, m: Match, facts: AttentionFacts):
        mask = m.mask
        if m.bias is not None:
            mask = b.op("Add", m.mask, m.bias)
            mask.shape = sd.broadcast_shapes(m.mask.shape, m.bias.shape)
            mask.dtype = m.mask.dtype
        q = m.q
        k = m.k if facts.merged_key is None else key_input(b, facts.merged_key)
        heads = q.shape[1] if q.rank == 4 else 1
        kv_heads = k.shape[1] if k.rank == 4 else 1
        scale = _scalar(m.scale) if m.scale is not None else 1.0
        # tanh(x·s)·cap = cap·tanh(x·(s·cap) / cap): the fused scale is s·cap, its soft-cap cap.
        cap = _scalar(m.softcap) if m.softcap is not None else 0.0
        if cap:
            scale *= cap
        info = facts.mask_info
        attrs = AttentionAttrs(
            num_heads=heads, kv_num_heads=kv_heads, scale=scale, causal=info.causal,
            mask_kind=MaskKind.NONE if mask is None else info.kind,
            nan_to_zero=m.nan_guard is not None, softcap=cap,
            head_size=q.shape[-1] if isinstance(q.shape[-1], int) else 0,
            window=info.window if mask is not None else 0,
            mask_fill=info.fill if mask is not None and info.fill is not None else 0.0)
        if facts.outputs:  # [O, P]: P replaces the probabilities read outside
            return b.fused("AttentionFused", q, k, m.v, mask, info.padding_input, attrs=attrs,
                           outputs=2)
        return b.fused("AttentionFused", q, k, m.v, mask, info.padding_input, attrs=attrs)

    def describe(self, m: Match, facts: AttentionFacts) -> str:
        q, k = m.q, m.k
        heads = q.shape[1] if q.rank == 4 else 1
        kv = k.shape[1] if k.rank == 4 else 1
        parts = [f"heads {heads}" + (f", kv heads {kv}" if kv != heads else "")]
        if m.scale is not None:
            parts.append(f"scale {_scalar(m.scale):.4g}")
        if m.softcap is not None:
            parts.append(f"soft-cap {_scalar(m.softcap):g}")
        info = facts.mask_info
        parts.append("no mask" if m.mask is None else f"mask {info.kind}"
                     + (f" (window {info.window})" if info.window else "")
                     + (" (a bias: values between 0 and the masking range)" if info.bias else ""))
        if m.bias is not None:
            parts.append("+ bias")
        if facts.outputs:
            parts.append("probabilities read outside (output P)")
        return ", ".join(parts)
