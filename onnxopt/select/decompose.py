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

from onnxopt.ops import FUSED_OPS
from onnxopt.ops.attention import scaled_scores
from onnxopt.select._emit import i64, zero_nan
from onnxopt.select.kernel import Kernel


def _emit(op_name: str):
    def emit(b, node, target):
        return FUSED_OPS[op_name].decompose(b, node)
    return emit


def _emit_attention_lean(b, node, target):
    q, k, v = node.inputs[:3]
    out = lean_attention(b, node, q, k, v, node.input(3))
    if node.attr("nan_to_zero", 0):
        out = zero_nan(b, out, q.dtype or "float32")
    return [out]


def lean_attention(b, node, q, k, v, mask):
    """``softmax(softcap(Q·Kᵀ·scale) + mask)·V`` for ``node``'s heads, scale and soft-cap, on
    the given tensors (the whole node's, or a block of its queries); without the NaN guard."""
    heads = node.attr("num_heads", 0)
    kv_heads = node.attr("kv_num_heads", heads) or heads
    grouped = node.inputs[0].rank == 4 and heads and kv_heads != heads
    if grouped:  # [B, H, S, D] -> [B, Hkv, n_rep*S, D]: query heads sharing a kv head, stacked
        q = b.op("Reshape", q, i64(b, [0, kv_heads, -1, 0], "group"))
    scores = b.op("MatMul", q, k)
    scores.producer.sem["transpose_b"] = True
    scores = scaled_scores(b, node, scores)
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


def _lean_changes_something(node, target) -> str | None:
    heads = node.attr("num_heads", 0)
    grouped = node.inputs[0].rank == 4 and node.attr("kv_num_heads", heads) not in (0, heads)
    if node.attr("nan_to_zero", 0) or (grouped and node.attr("scale", 1.0) != 1.0):
        return None
    return "would emit the plain decomposition: no NaN guard to move, no grouped scale"


def decomposition_kernels() -> list[Kernel]:
    kernels = [
        Kernel(name=f"decompose.{name}", implements=name, backend="decompose", emit=_emit(name),
               dtypes=frozenset({"float32", "float16", "bfloat16", "float64"}), cost=1.0,
               notes="standard ONNX ops; always legal")
        for name in sorted(FUSED_OPS)
    ]
    kernels.append(Kernel(
        name="decompose.AttentionFused.lean", implements="AttentionFused",
        backend="decompose", emit=_emit_attention_lean,
        dtypes=frozenset({"float32", "float16", "bfloat16", "float64"}),
        requires=_lean_changes_something, cost=0.95,
        notes="NaN guard on the output; grouped scale folded into the QK MatMul"))
    return kernels
