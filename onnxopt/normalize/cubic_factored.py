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

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Node
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Value
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.normalize._common import float_scalar, power_of, scalar_operand, square
from onnxopt.refusal import Refusal
from onnxopt.rewrite.pattern import PatternRewrite, case

NAME = "cubic_factored"


def _scalar_on(side: int):
    """An Op ``check`` for ``v·c``: ``scalar_operand`` reads the float scalar ``c`` on ``side``
    (the second operand when both are), of no higher rank than ``v``."""
    def check(node: Node) -> Refusal | None:
        found = scalar_operand(node)
        if found is not None and found[0] == side:
            v, const = node.inputs[1 - side], node.inputs[side]
            if v.rank is not None and len(const.shape or ()) <= v.rank:
                return None
        return Refusal("not_a_scalar", f"no float scalar on side {side} that broadcasts "
                       "nothing", node.name)
    return check


def _scaled(p: Builder, v: Pat, c: str, name: str) -> Pat:
    """``v·c`` read by the Add alone, ``c`` the float scalar :func:`scalar_operand` picks."""
    return p.any(p.Mul(v, p.var(c), check=_scalar_on(1), commutative=False, name=f"{name}_vc",
                       private=True, other_attrs=True),
                 p.Mul(p.var(c), v, check=_scalar_on(0), commutative=False, name=f"{name}_cv",
                       private=True, other_attrs=True))


def _cube(p: Builder, x: Pat) -> Pat:
    """``Pow(x, 3)``, ``x·(x·x)`` or ``(x·x)·x`` ."""
    return p.any(p.Pow(x, p.var("cube_exponent"), check=power_of(3), other_attrs=True),
                 p.Mul(x, square(p, x, "cube_square"), other_attrs=True))


def _pattern(p: Builder) -> Pat:
    """Add(x·c1, x³·c3), either way round."""
    x = p.var("x")
    return p.Add(_scaled(p, x, "c1", "linear"), _scaled(p, _cube(p, x), "c3", "cubic"),
                 other_attrs=True)


def _factorable(m: Match) -> bool:
    """``c1`` a finite non-zero number (else the Add's other order is tried)."""
    c1 = float_scalar(m.c1)
    return c1 != 0 and math.isfinite(c1)


def _rewrite(graph: Graph, m: Match) -> bool:
    add, x, c1_value, c3_value = m.root, m.x, m.c1, m.c3
    cub_mul = m.cubic_vc or m.cubic_cv
    cube = cub_mul.inputs[0] if cub_mul is m.cubic_vc else cub_mul.inputs[1]
    dtype = add.output.dtype
    if dtype is None or not (x.dtype == cube.dtype == c1_value.dtype == c3_value.dtype == dtype):
        return False
    ratio = float_scalar(c3_value) / float_scalar(c1_value)
    return _factor(graph, add, x, cube, c1_value, ratio, [m.linear_vc or m.linear_cv, cub_mul])


# A search (``require``): the cube's spellings and the Add's operand orders are tried in turn.
# Not bit-exact (the quotient rounded once): a site of onnxopt.ir.exactness.
cubic_factored = PatternRewrite.of(case(_pattern, ("Add",), _rewrite, permits=NAME,
                                        require=_factorable))


def _factor(graph: Graph, add: Node, x: Value, cube: Value, c1: Value, ratio: float,
            dead: list[Node]) -> bool:
    dtype = add.output.dtype
    arr = np.full(tuple(c1.const.shape), ratio, dtype=np.float64).astype(numpy_dtype(dtype))
    ratio_value = graph.add_constant(LazyTensor.from_array(arr), hint="cubic")
    build = NodeBuilder(graph, add, NAME, by_op=True)
    term = build.node("Mul", [cube, ratio_value], dtype=dtype, shape=cube.shape)
    inner = build.node("Add", [x, term.output], dtype=dtype, shape=add.output.shape)
    outer = build.node("Mul", [inner.output, c1], dtype=dtype, shape=add.output.shape)
    if not replace_value(graph, add.output, outer.output, inexact=site(NAME, add)):
        graph.remove([outer, inner, term])
        graph.remove_constant(ratio_value)
        return False
    remove_if_dead(graph, add, *dead)
    return True
