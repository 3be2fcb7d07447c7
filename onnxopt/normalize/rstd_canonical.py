"""A norm's reciprocal standard deviation is a ``Reciprocal``, applied before the weight.

    Div(1, Sqrt(v))             ->  Reciprocal(Sqrt(v))
    Mul(d, Mul(r, γ))           ->  Mul(Mul(d, r), γ)      r = Reciprocal(Sqrt(v)), γ a constant

(either operand order in both Muls; ``d`` computed, not a constant).

Why: flax's norms (and so every model converted by jax2tf and tf2onnx) fold the weight
into the reciprocal standard deviation, ``mul = rsqrt(var + ε) · γ; y = d · mul``, and
tf2onnx writes ``rsqrt`` as ``Reciprocal(Sqrt(·))`` or, from other graphs, ``1 / Sqrt(·)``.
PyTorch normalises first and weights after, ``(d · rstd) · γ``; with this form the LayerNorm
and RMSNorm patterns read one spelling. ``1 / s`` and ``Reciprocal(s)`` are the same IEEE
division; re-associating the product changes only its last rounding.

Limited to an ``r`` that is a reciprocal square root (the norm's ``rstd``): elsewhere the
order of a product by a constant is some other pattern's business. The inner ``Mul`` must
be read by nothing else (else ``r·γ`` is computed anyway and nothing is gained); the
reassociated product broadcasts to the same shape, and its first factor ``d·r`` to no more
than that.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.normalize._common import (
    float_scalar,
    is_op,
    is_private,
    live_ops,
    new_node,
)
from onnxopt.rewrite.driver import PassResult

NAME = "rstd_canonical"


# A hand walk, not a pattern (onnxopt.rewrite.pattern): not yet ported: its operand orders are
# tried with conditions between them (dtypes, privacy) that a first-match pattern would not retry,
# so outputs could change.
def rstd_canonical(model: Model) -> PassResult:
    """Spell reciprocal square roots as Reciprocal and apply them before the weight."""
    count = 0
    for graph, node in live_ops(model, "Div", "Mul"):
        if node.op_type == "Div":
            count += _reciprocal(graph, node)  # the same IEEE division: exact
        elif model.exactness.permits(NAME, node):
            count += _weight_last(graph, node)  # a regrouped product: not exact
    return PassResult(count)


def _is_sqrt(value: Value | None) -> bool:
    return value is not None and is_op(value.producer, "Sqrt")


def _is_rstd(value: Value) -> bool:
    node = value.producer
    return is_op(node, "Reciprocal") and _is_sqrt(node.input(0))


def _reciprocal(graph: Graph, div: Node) -> int:
    """Div(1, Sqrt(v)) -> Reciprocal(Sqrt(v)), when the one broadcasts nothing."""
    if len(div.inputs) != 2 or not _is_sqrt(div.inputs[1]):
        return 0
    one, std = div.inputs
    if float_scalar(one) != 1.0 or one.dtype != std.dtype or std.rank is None \
            or len(one.shape or ()) > std.rank:
        return 0
    rec = new_node(graph, "Reciprocal", [std], before=div, created_by=NAME, dtype=std.dtype,
                   shape=div.output.shape)
    if not replace_value(graph, div.output, rec.output):
        graph.remove(rec)
        return 0
    remove_if_dead(graph, div)
    return 1


def _weight_last(graph: Graph, outer: Node) -> int:
    """Mul(d, Mul(r, γ)) -> Mul(Mul(d, r), γ) for an rstd ``r`` and a constant ``γ``."""
    if len(outer.inputs) != 2 or None in outer.inputs:
        return 0
    for k in (1, 0):
        d, rg = outer.inputs[1 - k], outer.inputs[k]
        inner = rg.producer
        if not is_op(inner, "Mul") or len(inner.inputs) != 2 or not is_private(rg, outer):
            continue
        for r, gamma in (inner.inputs, reversed(inner.inputs)):
            if r is None or gamma is None or gamma.const is None or not _is_rstd(r):
                continue
            if d.const is not None or not (d.dtype == r.dtype == gamma.dtype == outer.output.dtype):
                continue
            return _reassociate(graph, outer, inner, d, r, gamma)
    return 0


def _reassociate(graph: Graph, outer: Node, inner: Node, d: Value, r: Value, gamma: Value) -> int:
    dtype = outer.output.dtype
    dr = new_node(graph, "Mul", [d, r], before=outer, created_by=NAME, dtype=dtype,
                  shape=sd.broadcast_shapes(d.shape, r.shape))
    weighted = new_node(graph, "Mul", [dr.output, gamma], before=outer, created_by=NAME,
                        dtype=dtype, shape=outer.output.shape)
    if not replace_value(graph, outer.output, weighted.output, inexact=site(NAME, outer)):
        graph.remove([weighted, dr])
        return 0
    remove_if_dead(graph, outer, inner)
    return 1
