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
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.normalize._common import float_scalar
from onnxopt.rewrite.pattern import PatternRewrite, case

NAME = "rstd_canonical"


def _sqrt(p: Builder) -> Pat:
    return p.Sqrt(name="sqrt", other_inputs=True, other_attrs=True)


def _one_over_sqrt(p: Builder) -> Pat:
    """Div(one, Sqrt(v))."""
    return p.Div(p.var("one"), _sqrt(p), name="div", commutative=False, other_attrs=True)


def _reciprocal(graph: Graph, m: Match) -> bool:
    """Div(1, Sqrt(v)) -> Reciprocal(Sqrt(v)), when the one broadcasts nothing."""
    div, one, std = m.div, m.one, m.sqrt.output
    if float_scalar(one) != 1.0 or one.dtype != std.dtype or std.rank is None \
            or len(one.shape or ()) > std.rank:
        return False
    rec = NodeBuilder(graph, div, NAME, by_op=True).node("Reciprocal", [std], dtype=std.dtype,
                                                         shape=div.output.shape)
    if not replace_value(graph, div.output, rec.output):
        graph.remove(rec)
        return False
    remove_if_dead(graph, div)
    return True


def _weighted_rstd(p: Builder) -> Pat:
    """Mul(d, Mul(Reciprocal(Sqrt(v)), γ)), each Mul either way round, the inner one read by
    the outer alone."""
    rstd = p.Reciprocal(_sqrt(p), name="rstd", other_inputs=True, other_attrs=True)
    inner = p.Mul(rstd, p.const("gamma"), name="inner", private=True, other_attrs=True)
    return p.Mul(p.var("d"), inner, name="outer", other_attrs=True)


def _computed_alike(m: Match) -> bool:
    """``d`` computed, not a constant, and every dtype the same (else the next operand order
    is tried, as for a miss)."""
    d, r, gamma = m.d, m.rstd.output, m.gamma
    return d.const is None and d.dtype == r.dtype == gamma.dtype == m.outer.output.dtype


def _weight_last(graph: Graph, m: Match) -> bool:
    """Mul(d, Mul(r, γ)) -> Mul(Mul(d, r), γ) for an rstd ``r`` and a constant ``γ``."""
    return _reassociate(graph, m.outer, m.inner, m.d, m.rstd.output, m.gamma)


# ``1 / s`` and ``Reciprocal(s)`` are the same IEEE division (exact); the regrouped product is
# not: a site of onnxopt.ir.exactness. Both in one walk over Divs and Muls.
rstd_canonical = PatternRewrite.of(
    case(_one_over_sqrt, ("Div",), _reciprocal),
    case(_weighted_rstd, ("Mul",), _weight_last, permits=NAME, require=_computed_alike))


def _reassociate(graph: Graph, outer: Node, inner: Node, d: Value, r: Value,
                 gamma: Value) -> bool:
    dtype = outer.output.dtype
    build = NodeBuilder(graph, outer, NAME, by_op=True)
    dr = build.node("Mul", [d, r], dtype=dtype, shape=sd.broadcast_shapes(d.shape, r.shape))
    weighted = build.node("Mul", [dr.output, gamma], dtype=dtype, shape=outer.output.shape)
    if not replace_value(graph, outer.output, weighted.output, inexact=site(NAME, outer)):
        graph.remove([weighted, dr])
        return False
    remove_if_dead(graph, outer, inner)
    return True
