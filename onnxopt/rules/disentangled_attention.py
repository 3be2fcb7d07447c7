"""Q·Kᵀ with heads merged into the batch, and score terms computed beside it (DeBERTa).

Disentangled attention (DeBERTa-v2/v3) scores ``Q·Kᵀ + c2p + p2c``: the content-to-content
product, plus content-to-position and position-to-content terms gathered from relative
position projections, each scaled. What comes after (mask, softmax, ·V) is ordinary
attention, so the attention rule fuses it with the two position terms as a computed bias
(its ``mask`` port: values the model computes from its inputs, added to the scores).

Two things here make that possible without a rule of its own:

- DeBERTa multiplies on ``[B·H, S, D]`` views. After the head-unmerging normal form the
  score MatMul is 4-D again, but K reaches it as ``Reshape(Transpose(K'), [B, H, D, S])``
  with ``K' = [B·H, S, D]``: the transpose sits behind a Reshape, where no MatMul flag can
  absorb it. :func:`merged_key` proves that the operand is Kᵀ for a K of shape
  ``[B, H, S, D]`` (the Reshape only splits the merged batch back into B and H, which keeps
  every element where it was), and names the K to read: the model's own 4-D K when ``K'``
  is its merge, else the operand transposed back (exact either way: only data movement).
- A computed term must not read V's values arithmetically: then it is not a score bias but
  part of the output's own arithmetic (:func:`term_reading_v`). A mask built from a
  predicate on V (its zero rows are padding) is a mask all the same: the walk stops at
  boolean values.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.refusal import Refusal

# Ops that only move or relabel data: V seen through them is still V.
_LAYOUT_OPS = frozenset({"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"})

# Ops that read only their input's shape: a term built from V's shape does not read V.
_SHAPE_ONLY = frozenset({"Shape", "Size"})


@dataclass(frozen=True)
class MergedKey:
    """The K that a score MatMul's un-flagged operand ``kt`` is the transpose of.

    ``value``: the model's own ``[B, H, S, D]`` K when it exists; ``None``: transpose ``kt``
    back (``key_input``)."""

    kt: Value
    value: Value | None


def _not_transposed(qk: Node) -> Refusal:
    return Refusal("k_not_transposed", f"{qk.name}: K is not transposed (Q·K with no Kᵀ): not a "
                   "dot-product score", qk.name)


def merged_key(kt: Value, qk: Node) -> MergedKey | Refusal:
    """``kt = Reshape(Transpose(K', perm=[0, 2, 1]), [B, H, D, S])`` with ``K' = [B·H, S, D]``:
    the score reads Kᵀ for ``K = Reshape(K', [B, H, S, D])``. Anything else: not Kᵀ."""
    reshape = kt.producer
    if reshape is None or reshape.op_type != "Reshape" or kt.shape is None or len(kt.shape) != 4:
        return _not_transposed(qk)
    transpose = reshape.inputs[0].producer
    if transpose is None or transpose.op_type != "Transpose" or transpose.attr("perm") is None:
        return _not_transposed(qk)
    merged = transpose.inputs[0]
    if list(transpose.attr("perm")) != [0, 2, 1] or merged.shape is None or len(merged.shape) != 3:
        return _not_transposed(qk)
    b, h, d, s = kt.shape
    n, s2, d2 = merged.shape
    if not (isinstance(h, int) and sd.same(n, sd.mul(b, h)) and sd.same(s, s2)
            and sd.same(d, d2)):
        return Refusal("merged_key_shape", f"{reshape.name}: Kᵀ is reshaped from "
                       f"{list(transpose.output.shape or ())} to {list(kt.shape)}, not split "
                       "from [B·H, D, S] into [B, H, D, S]", reshape.name)
    source = merged.producer
    if source is not None and source.op_type == "Reshape":
        k4 = source.inputs[0]
        if k4.shape is not None and len(k4.shape) == 4 and all(
                sd.same(x, y) for x, y in zip(k4.shape, (b, h, s, d))):
            return MergedKey(kt, k4)
    return MergedKey(kt, None)


def key_view(key: MergedKey) -> Value:
    """K as the checks see it: the model's own, or a stand-in with K's shape (not in a graph)."""
    if key.value is not None:
        return key.value
    b, h, d, s = key.kt.shape
    return Value(key.kt.name, key.kt.dtype, (b, h, s, d))


def key_input(b: NodeBuilder, key: MergedKey) -> Value:
    """The ``[B, H, S, D]`` K the fused op reads."""
    if key.value is not None:
        return key.value
    out = b.op("Transpose", key.kt, perm=[0, 1, 3, 2])
    bb, h, d, s = key.kt.shape
    out.shape, out.dtype = (bb, h, s, d), key.kt.dtype
    return out


def _v_views(v: Value) -> set[int]:
    """V and what it is a view of, back to the op that computed it."""
    seen = {id(v)}
    while v.producer is not None and v.producer.op_type in _LAYOUT_OPS:
        v = v.producer.inputs[0]
        seen.add(id(v))
    return seen


def term_reading_v(terms: list[Value | None], v: Value) -> Refusal | None:
    """Refuse a score term (mask, bias) computed from V or a view of it, other than through a
    boolean (a predicate of V, such as which of its rows are padding, makes a mask)."""
    forbidden = _v_views(v)
    for term in terms:
        if term is None:
            continue
        stack, seen = [term], set()
        while stack:
            x = stack.pop()
            if id(x) in forbidden:
                return Refusal("score_term_reads_v", f"%{term.name}: a term added to the scores "
                               f"reads V (%{x.name}): not a score bias", f"%{term.name}")
            if (id(x) in seen or x.producer is None or x.producer.op_type in _SHAPE_ONLY
                    or x.dtype == "bool"):
                continue  # (a predicate of V — which positions are padding — is a mask)
            seen.add(id(x))
            stack.extend(i for i in x.producer.inputs if i is not None)
    return None
