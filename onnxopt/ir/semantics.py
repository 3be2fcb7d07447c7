"""The meaning ONNX spelling hides, recorded on each node as ``node.sem``.

ONNX spells the same operation differently across opsets and exporters:
ReduceMean takes its axes as an attribute before opset 18 and as a constant
input after; a MatMul against a transposed operand is a Transpose node plus a
MatMul. Passes and rules should not care. ``annotate`` reads the spelling and
writes the meaning: ``axes`` (explicit, non-negative where the rank is known,
``None`` for "all axes"), ``keepdims``, ``transpose_a``/``transpose_b``, and a
``layout`` for ops whose ONNX definition fixes one.
"""

from __future__ import annotations

from onnxopt.ir.node import STANDARD_DOMAINS, Node

COMMUTATIVE = frozenset({"Add", "Mul", "And", "Or", "Xor", "Equal", "Max", "Min", "Sum",
                         "BitwiseAnd", "BitwiseOr", "BitwiseXor"})
"""Ops whose two operands may swap with every element unchanged (IEEE addition and
multiplication commute; Max/Min propagate NaN from either side in ONNX Runtime)."""

REDUCE_OPS = frozenset({
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
})
CHANNEL_FIRST_OPS = frozenset({
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "BatchNormalization", "InstanceNormalization", "LpPool", "Resize",
})


def annotate(node: Node) -> None:
    """Fill ``node.sem`` from the node's ONNX form (idempotent)."""
    if node.domain not in STANDARD_DOMAINS:
        return
    op = node.op_type
    if op in REDUCE_OPS:
        node.sem.update(reduction_semantics(node))
    elif op == "MatMul":
        node.sem.setdefault("transpose_a", False)
        node.sem.setdefault("transpose_b", False)
        node.sem["reduction_axis"] = -1
    elif op == "Gemm":
        node.sem["transpose_a"] = bool(node.attr("transA", 0))
        node.sem["transpose_b"] = bool(node.attr("transB", 0))
        node.sem["reduction_axis"] = -1
    elif op in ("Softmax", "LogSoftmax"):
        node.sem["axes"] = (_normalize_axis(node.attr("axis", -1), node),)
    elif op in CHANNEL_FIRST_OPS:
        node.sem["layout"] = "NCHW"
    elif op == "Transpose":
        perm = node.attr("perm")
        rank = node.inputs[0].rank if node.inputs and node.inputs[0] is not None else None
        if perm is None and rank is not None:
            perm = tuple(reversed(range(rank)))
        node.sem["perm"] = tuple(perm) if perm is not None else None


def reduction_semantics(node: Node) -> dict:
    """Axes and keepdims of a Reduce* node, whether axes came as attribute or input."""
    keepdims = bool(node.attr("keepdims", 1))
    axes = node.attr("axes")
    axes_known = True
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        axes_value = node.inputs[1]
        if axes_value.const is not None and axes_value.const.dtype in ("int64", "int32"):
            axes = [int(a) for a in axes_value.const.numpy().reshape(-1)]
        else:  # computed, or not integers (ORT refuses such a model; it is not ours to read)
            axes_known = False
    if not axes_known:
        return {"axes": "dynamic", "keepdims": keepdims}
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return {"axes": (), "keepdims": keepdims}
        return {"axes": None, "keepdims": keepdims}
    return {"axes": tuple(sorted(_normalize_axis(a, node) for a in axes)), "keepdims": keepdims}


def _normalize_axis(axis: int, node: Node) -> int:
    x = node.inputs[0] if node.inputs else None
    rank = x.rank if x is not None else None
    if rank is not None and axis < 0:
        return axis + rank
    return axis
