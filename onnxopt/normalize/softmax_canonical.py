"""Softmax spelled out in elementary ops becomes ``Softmax(axis)`` with ``sem["stable"]``.

Why: a softmax written by hand (or by an exporter that decomposes it) is five
nodes the attention pattern would otherwise have to match in two variants:

    Div(Exp(Sub(x, ReduceMax(x, a))), ReduceSum(Exp(Sub(x, ReduceMax(x, a))), a))  ->  Softmax(x, a)
    Div(Exp(x), ReduceSum(Exp(x), a))                                                ->  Softmax(x, a)

(both reductions with ``keepdims=1`` over one explicit axis ``a``; the ``Exp``
shared by the sum and the division). The first is the numerically stable
form; the second is mathematically equal (the max cancels in the ratio) but
overflows for large inputs, which ONNX's ``Softmax`` does not — so both map to
``Softmax`` with ``stable=True``: ONNX defines Softmax, and ONNX Runtime
computes it, subtracting the maximum. Existing Softmax nodes are marked
stable too, so downstream rules see one form.

Refusals leave the graph unchanged: an intermediate with another reader (it
would have to be computed anyway; for the stable form this includes the max
and the difference), reductions over different or several axes, ``keepdims=0``
(the division would broadcast differently). ``exp(x - m) / sum(exp(x - m))``
with ``m`` not the max of ``x`` is simply the second form applied to ``x - m``.
"""

from __future__ import annotations

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.normalize._common import int_attr, is_private
from onnxopt.rewrite.pattern import PatternRewrite, case

NAME = "softmax_canonical"


def _softmax(p: Builder) -> Pat:
    """A Softmax not yet marked stable."""
    return p.Softmax(p.maybe(p.var("x")), name="softmax", sem={"stable": False},
                     other_inputs=True, other_attrs=True)


def _mark(graph: Graph, m: Match) -> bool:
    """Marking is exact (a note for the patterns)."""
    m.softmax.sem["stable"] = True
    graph.changed(m.softmax)
    return True


def _spelled_out(p: Builder) -> Pat:
    """Div(Exp(v), ReduceSum(Exp(v))), v either Sub(x, ReduceMax(x)) or x itself (the same
    Exp node on both sides: one pattern node matched twice)."""
    stable = p.Sub(p.var("x"), p.ReduceMax(p.var("x"), name="rmax", other_inputs=True,
                                           other_attrs=True), name="sub")
    exp = p.Exp(p.any(stable, p.var("x")), name="exp", other_inputs=True, other_attrs=True)
    rsum = p.ReduceSum(exp, name="rsum", other_inputs=True, other_attrs=True)
    return p.Div(exp, rsum, name="div", commutative=False, other_attrs=True)


def _rewrite(graph: Graph, m: Match) -> bool:
    """What the pattern cannot say: every intermediate private to the softmax (the Exp read
    by the sum and the division alone), one kept axis that both reductions share."""
    div, exp, rsum = m.div, m.exp, m.rsum
    e, s = exp.output, rsum.output
    if not is_private(s, div) or e.is_graph_output or len(e._uses) != 2:
        return False
    rank = e.rank
    axis = _single_axis(rsum, rank)
    if axis is None:
        return False
    dead = [div, rsum, exp]
    if m.sub is not None:  # the stable form: every piece must be private to it
        sub, rmax = m.sub, m.rmax
        rank = rank if rank is not None else m.x.rank
        if not is_private(exp.inputs[0], exp) or not is_private(sub.inputs[1], sub):
            return False
        if _single_axis(rmax, rank) != _single_axis(rsum, rank):
            return False
        axis = _single_axis(rsum, rank)
        dead += [sub, rmax]
    return bool(_replace(graph, div, m.x, axis, dead))


# Softmaxes marked stable and decomposed ones rewritten, in one walk. The rewrite is not exact
# (ONNX Runtime's Softmax sums and divides in its own order): a site of onnxopt.ir.exactness.
softmax_canonical = PatternRewrite.of(case(_softmax, ("Softmax",), _mark),
                                      case(_spelled_out, ("Div",), _rewrite, permits=NAME))


def _single_axis(reduce: Node, rank: int | None) -> int | None:
    """The one axis a keepdims=1 reduction reduces over (normalized when the rank is known)."""
    sem = reduce.sem
    if not sem.get("keepdims", True):
        return None
    axes = sem.get("axes")
    if axes is None and rank == 1:
        return 0
    if not isinstance(axes, tuple) or len(axes) != 1:
        return None
    axis = axes[0]
    return axis + rank if axis < 0 and rank is not None else axis


def _replace(graph: Graph, div: Node, x: Value, axis: int, dead: list[Node]) -> int:
    softmax = NodeBuilder(graph, div, NAME, by_op=True).node("Softmax", [x],
                                                             attrs={"axis": int_attr(axis)},
                                                             dtype=div.output.dtype,
                                                             shape=div.output.shape)
    softmax.sem["stable"] = True
    if not replace_value(graph, div.output, softmax.output, inexact=site(NAME, div)):
        graph.remove(softmax)
        return 0
    graph.remove(dead)
    return 1
