"""Scale factors in one place: after the MatMul, as one ``Mul`` by one constant.

Why: attention's ``1/sqrt(d)`` is spelled in every possible place. GPT-2 and
BERT divide the scores (``Div(MatMul(q, k), 8)``), PyTorch's SDPA export
multiplies both ``q`` and ``k`` by ``d**-0.25`` before the MatMul, others scale
only ``q``, or multiply twice. All are the same function up to rounding; this
pass rewrites them into the single form the attention pattern expects:

    Div(x, c)                            ->  Mul(x, 1/c)
    Mul(Mul(x, c1), c2)                  ->  Mul(x, c1*c2)
    MatMul(Mul(a, c1), Mul(b, c2))       ->  Mul(MatMul(a, b), c1*c2)   (either side alone too)

Only floating-point scalar constants qualify (one element; for the MatMul
case a shape of rank no higher than the operand's and the MatMul's output, so
moving it cannot broadcast anything larger), and only when each inner
``Mul`` is read by nothing else — otherwise the unscaled value would have to
be computed as well, and nothing is gained. The folded constant keeps the
operand's dtype; the arithmetic is done in float64 and rounded once.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Value
from onnxopt.normalize._common import (
    is_op,
    is_private,
    scalar_operand,
)
from onnxopt.rewrite.driver import PassResult

NAME = "canonical_scale"


# A hand walk, not a pattern (onnxopt.rewrite.pattern): scales gathered along chains of Mul/Div of
# any length on either MatMul side: patterns have a fixed depth.
def canonical_scale(model: Model) -> PassResult:
    """Move float scalar scales onto one Mul after each MatMul; return the number of rewrites.

    Not exact: ``x·(1/c)`` is not ``x/c`` in the last bit, and a product regrouped rounds
    differently; each rewrite is a site of :mod:`onnxopt.ir.exactness`, made only where the
    run's policy permits it."""
    policy = model.exactness
    count = 0
    for graph in model.graph.all_graphs():
        for node in graph:
            rewrite = _REWRITES.get(node.op_type) if is_op(node, *_REWRITES) else None
            if rewrite is not None and policy.permits(NAME, node):
                count += rewrite(graph, node)
    return PassResult(count)


def _constant(graph: Graph, value: float, dtype: str, shape: tuple[int, ...]) -> Value:
    arr = np.full(shape, value, dtype=np.float64).astype(numpy_dtype(dtype))
    return graph.add_constant(LazyTensor.from_array(arr), hint="scale")


def _replace(graph: Graph, old: Node, new: Node, dead: list[Node]) -> int:
    if not replace_value(graph, old.output, new.output, inexact=site(NAME, old)):
        graph.remove(new)
        return 0
    remove_if_dead(graph, old, *dead)
    return 1


def _div(graph: Graph, node: Node) -> int:
    """Div(x, c) -> Mul(x, 1/c)."""
    x, c = node.inputs[0], node.inputs[1] if len(node.inputs) == 2 else None
    op = scalar_operand(node)
    if op is None or op[0] != 1 or op[1] == 0 or x is None or x.dtype != c.dtype:
        return 0
    inv = _constant(graph, 1.0 / op[1], c.dtype, tuple(c.const.shape))
    mul = NodeBuilder(graph, node, NAME, by_op=True).node("Mul", [x, inv], dtype=node.output.dtype,
                                                          shape=node.output.shape)
    return _replace(graph, node, mul, [])


def _mul_mul(graph: Graph, node: Node) -> int:
    """Mul(Mul(x, c1), c2) -> Mul(x, c1*c2)."""
    outer = scalar_operand(node)
    if outer is None:
        return 0
    k2, c2 = outer
    inner = node.inputs[1 - k2].producer
    if not is_op(inner, "Mul") or not is_private(node.inputs[1 - k2], node):
        return 0
    found = scalar_operand(inner)
    if found is None:
        return 0
    k1, c1 = found
    x = inner.inputs[1 - k1]
    v1, v2 = inner.inputs[k1], node.inputs[k2]
    if x.dtype is None or not (x.dtype == v1.dtype == v2.dtype):
        return 0
    shape = np.broadcast_shapes(tuple(v1.const.shape), tuple(v2.const.shape))
    scale = _constant(graph, c1 * c2, x.dtype, shape)
    mul = NodeBuilder(graph, node, NAME, by_op=True).node("Mul", [x, scale],
                                                          dtype=node.output.dtype,
                                                          shape=node.output.shape)
    return _replace(graph, node, mul, [inner])


def _is_weight(v) -> bool:
    """A constant, possibly behind the Mul that carries a scale into it."""
    if v.const is not None:
        return True
    mul = v.producer
    return is_op(mul, "Mul") and any(x is not None and x.const is not None and x.const.size > 1
                                     for x in mul.inputs)


def _matmul(graph: Graph, node: Node) -> int:
    """MatMul(Mul(a, c1), Mul(b, c2)) -> Mul(MatMul(a, b), c1*c2).

    Only between two activations (attention's Q·Kᵀ): moving a scale across a
    MatMul with a constant weight would tear apart the block that produced it
    (GELU's 0.5 before the next projection) and gains nothing.
    """
    if len(node.inputs) != 2 or any(v is None for v in node.inputs):
        return 0
    if any(_is_weight(v) for v in node.inputs):
        return 0
    out_rank = node.output.rank
    operands = list(node.inputs)
    scale, scale_rank, dead = 1.0, 0, []
    for i, v in enumerate(node.inputs):
        mul = v.producer
        if not is_op(mul, "Mul") or not is_private(v, node):
            continue
        found = scalar_operand(mul)
        if found is None:
            continue
        k, c = found
        x, cv = mul.inputs[1 - k], mul.inputs[k]
        rank = len(cv.const.shape)
        if rank and (x.rank is None or out_rank is None or rank > min(x.rank, out_rank)):
            continue  # the scale's shape could broadcast the MatMul's operand or result
        if x.dtype is None or x.dtype != cv.dtype:
            continue
        operands[i] = x
        scale *= c
        scale_rank = max(scale_rank, rank)
        scale_dtype = cv.dtype  # a float type: the scale was found as a float scalar
        dead.append(mul)
    if not dead:
        return 0
    build = NodeBuilder(graph, node, NAME, by_op=True)
    mm = build.node("MatMul", operands, attrs=dict(node.attrs), dtype=node.output.dtype,
                    shape=node.output.shape)
    mm.sem.update(node.sem)
    const = _constant(graph, scale, scale_dtype, (1,) * scale_rank)
    mul = build.node("Mul", [mm.output, const], dtype=node.output.dtype, shape=node.output.shape)
    if not replace_value(graph, node.output, mul.output, inexact=site(NAME, node)):
        graph.remove([mul, mm])
        return 0
    remove_if_dead(graph, node, *dead)
    return 1


_REWRITES = {"Div": _div, "Mul": _mul_mul, "MatMul": _matmul}
