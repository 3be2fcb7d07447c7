"""The always-legal kernels: a fused op's own decomposition into standard ONNX ops.

Plus ``decompose.AttentionFused.lean``, the attention decomposition spelled for
what ONNX Runtime's CPU graph optimizer and kernels do well:

- with ``nan_to_zero`` the decomposition zeroes NaN in the probabilities
  ``[B, H, S, L]``, as PyTorch's SDPA export does; a fully masked row is NaN in
  every probability and therefore in every output feature, so zeroing NaN in
  the output ``[B, H, S, D]`` gives the same result whenever V is finite, on
  L/D times fewer elements;
- with grouped-query heads the scale is applied to the grouped scores, right
  after their MatMul and before the reshape back to query heads, so ORT folds
  it into the MatMul (``FusedMatMul``) as it does for ungrouped attention: the
  same products, the same rounding.
"""

from __future__ import annotations

from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.ops import FUSED_OPS, AttentionAttrs, FusedAttrs
from onnxopt.ops.attention import scaled_scores
from onnxopt.refusal import Refusal, refusal
from onnxopt.select._emit import i64, zero_nan
from onnxopt.select.kernel import Backend, Kernel


def _emit(op_name: str):
    def emit(b, node: Node, attrs: FusedAttrs, target: Target):
        return FUSED_OPS[op_name].decompose(b, node)
    return emit


def _emit_attention_lean(b, node: Node, attrs: AttentionAttrs, target: Target):
    q, k, v = node.inputs[:3]
    out = lean_attention(b, node, attrs, q, k, v, node.input(3))
    if attrs.nan_to_zero:
        out = zero_nan(b, out, q.dtype or "float32")
    return [out]


def lean_attention(b, node: Node, attrs: AttentionAttrs, q, k, v, mask):
    """``softmax(softcap(Q·Kᵀ·scale) + mask)·V`` for ``node``'s heads, scale and soft-cap, on
    the given tensors (the whole node's, or a block of its queries); without the NaN guard."""
    heads, kv_heads = attrs.num_heads, attrs.kv_heads
    grouped = node.inputs[0].rank == 4 and heads and attrs.grouped_query
    if grouped:  # [B, H, S, D] -> [B, Hkv, n_rep*S, D]: query heads sharing a kv head, stacked
        q = b.op("Reshape", q, i64(b, [0, kv_heads, -1, 0], "group"))
    scores = b.op("MatMul", q, k)
    scores.producer.sem["transpose_b"] = True
    scores = scaled_scores(b, node, attrs, scores)
    if grouped:
        scores = b.op("Reshape", scores, i64(b, [0, heads, -1, 0], "ungroup"))
    if mask is not None:
        scores = b.op("Add", scores, mask)
    probs = b.op("Softmax", scores, axis=-1)
    if grouped:
        probs = b.op("Reshape", probs, i64(b, [0, kv_heads, -1, 0], "group"))
    out = b.op("MatMul", probs, v)
    if grouped:
        out = b.op("Reshape", out, i64(b, [0, heads, -1, 0], "ungroup"))
    return out


def _lean_changes_something(node: Node, attrs: AttentionAttrs, target: Target
                            ) -> Refusal | None:
    grouped = node.inputs[0].rank == 4 and attrs.grouped_query
    if attrs.nan_to_zero or (grouped and attrs.scale != 1.0):
        return None
    return refusal("same_as_decomposition", "would emit the plain decomposition: no NaN guard "
                   "to move, no grouped scale")


def decomposition_kernels() -> list[Kernel]:
    kernels = [
        Kernel(name=f"decompose.{name}", implements=name, backend=Backend.DECOMPOSE,
               emit=_emit(name),
               dtypes=frozenset({"float32", "float16", "bfloat16", "float64"}), cost=1.0,
               probabilities=True, notes="standard ONNX ops; always legal")
        for name in sorted(FUSED_OPS)
    ]
    kernels.append(Kernel(
        name="decompose.AttentionFused.lean", implements="AttentionFused",
        backend=Backend.DECOMPOSE, emit=_emit_attention_lean,
        dtypes=frozenset({"float32", "float16", "bfloat16", "float64"}),
        requires=_lean_changes_something, cost=0.95,
        notes="NaN guard on the output; grouped scale folded into the QK MatMul"))
    return kernels
