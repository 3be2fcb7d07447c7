"""An odd cubic ``c1·x + c2·x³`` is written with its linear coefficient factored out.

    Add(Mul(x, c1), Mul(x³, c2))  ->  Mul(Add(x, Mul(x³, c2/c1)), c1)

(``x³`` as ``Pow(x, 3)``, ``x·(x·x)`` or ``(x·x)·x``; either operand order in the Muls
and the Add; ``c1``, ``c2`` float scalar constants).

Why: the tanh approximation of GELU takes ``tanh(√(2/π)·(x + 0.044715·x³))``. Most
exporters keep that grouping, but a graph whose constants were folded by hand or by a
converter distributes the √(2/π): ``0.7978845608·x + 0.0356774·x³`` (seen in jax2tf
conversions of ``jax.nn.gelu(approximate=True)``). Factoring ``c1`` back out gives the one
form the GELU pattern reads. The quotient ``c2/c1`` is computed in float64 and rounded once
to the operand's type, so the result differs from the original by a rounding or two.

Only when both products are read by nothing but the Add (otherwise they are computed
anyway), ``c1`` is a finite non-zero number, and neither constant has a higher rank than
``x`` (so neither broadcasts ``x``). The cube itself may have other readers: it is kept.
"""

from __future__ import annotations

import math

import numpy as np

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
    live_ops,
    new_node,
    scalar_constant,
    scalar_operand,
    square_of,
)
from onnxopt.rewrite.driver import PassResult

NAME = "cubic_factored"


# A hand walk, not a pattern (onnxopt.rewrite.pattern): not yet ported: the cube's three spellings
# are searched with the scalar on either side, conditions between them that a first-match pattern
# would not retry.
def cubic_factored(model: Model) -> PassResult:
    """Factor the linear coefficient out of ``c1·x + c2·x³``; return how many were rewritten."""
    return PassResult(sum(_rewrite(graph, node) for graph, node in live_ops(model, "Add")
               if model.exactness.permits(NAME, node)))


def cube_of(value: Value) -> Value | None:
    """``x`` when ``value`` is ``Pow(x, 3)``, ``x·(x·x)`` or ``(x·x)·x``."""
    node = value.producer
    if not is_op(node, "Mul", "Pow") or len(node.inputs) != 2 or None in node.inputs:
        return None
    a, b = node.inputs
    if node.op_type == "Pow":
        ok = scalar_constant(b) == 3 and a.rank is not None and len(b.shape or ()) <= a.rank
        return a if ok else None
    if square_of(b) is a:
        return a
    if square_of(a) is b:
        return b
    return None


def _scaled(value: Value, add: Node) -> tuple[Node, Value, Value, float] | None:
    """(the Mul, its variable operand, its constant, the constant's value) for ``v·c`` read by
    ``add`` alone, the constant a float scalar of no higher rank than ``v``."""
    node = value.producer
    if not is_op(node, "Mul") or not is_private(value, add):
        return None
    found = scalar_operand(node)
    if found is None:
        return None
    k, c = found
    v, const = node.inputs[1 - k], node.inputs[k]
    if v.rank is None or len(const.shape or ()) > v.rank:
        return None
    return node, v, const, c


def _rewrite(graph: Graph, add: Node) -> int:
    if len(add.inputs) != 2 or None in add.inputs:
        return 0
    terms = [_scaled(v, add) for v in add.inputs]
    if None in terms:
        return 0
    for linear, cubic in (terms, reversed(terms)):
        (lin_mul, x, c1_value, c1), (cub_mul, cube, c3_value, c3) = linear, cubic
        if cube_of(cube) is not x or c1 == 0 or not math.isfinite(c1):
            continue
        dtype = add.output.dtype
        if dtype is None or not (x.dtype == cube.dtype == c1_value.dtype == c3_value.dtype == dtype):
            return 0
        return _factor(graph, add, x, cube, c1_value, c3 / c1, [lin_mul, cub_mul])
    return 0


def _factor(graph: Graph, add: Node, x: Value, cube: Value, c1: Value, ratio: float,
            dead: list[Node]) -> int:
    dtype = add.output.dtype
    arr = np.full(tuple(c1.const.shape), ratio, dtype=np.float64).astype(numpy_dtype(dtype))
    ratio_value = graph.add_constant(LazyTensor.from_array(arr), hint="cubic")
    term = new_node(graph, "Mul", [cube, ratio_value], before=add, created_by=NAME, dtype=dtype,
                    shape=cube.shape)
    inner = new_node(graph, "Add", [x, term.output], before=add, created_by=NAME, dtype=dtype,
                     shape=add.output.shape)
    outer = new_node(graph, "Mul", [inner.output, c1], before=add, created_by=NAME, dtype=dtype,
                     shape=add.output.shape)
    if not replace_value(graph, add.output, outer.output, inexact=site(NAME, add)):
        graph.remove([outer, inner, term])
        graph.remove_constant(ratio_value)
        return 0
    remove_if_dead(graph, add, *dead)
    return 1
