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

from onnxopt.ir.edit import replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.normalize._common import int_attr, is_op, is_private, new_node
from onnxopt.rewrite.driver import PassResult

NAME = "softmax_canonical"


def softmax_canonical(model: Model) -> PassResult:
    """Rewrite decomposed softmaxes into Softmax and mark every Softmax stable.

    Marking is exact (a note for the patterns); the rewrite is not (ONNX Runtime's Softmax
    sums and divides in its own order): a site of :mod:`onnxopt.ir.exactness`."""
    count = 0
    for graph in model.graph.all_graphs():
        for node in graph:
            if is_op(node, "Softmax"):
                if node.sem.get("stable") is not True:
                    node.sem["stable"] = True
                    graph.changed(node)
                    count += 1
            elif is_op(node, "Div") and model.exactness.permits(NAME, node):
                count += _rewrite(graph, node)
    return PassResult(count)


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


def _rewrite(graph: Graph, div: Node) -> int:
    e, s = div.input(0), div.input(1)
    if e is None or s is None or len(div.inputs) != 2:
        return 0
    exp, rsum = e.producer, s.producer
    if not is_op(exp, "Exp") or not is_op(rsum, "ReduceSum") or rsum.input(0) is not e:
        return 0
    if not is_private(s, div) or e.is_graph_output or len(e._uses) != 2:
        return 0
    rank = e.rank
    axis = _single_axis(rsum, rank)
    if axis is None:
        return 0
    dead = [div, rsum, exp]
    x = exp.inputs[0]
    sub = x.producer
    if is_op(sub, "Sub") and is_op(sub.input(1).producer if sub.input(1) else None, "ReduceMax") \
            and sub.input(1).producer.input(0) is sub.input(0):
        # the stable form: every piece must be private to it
        rmax = sub.inputs[1].producer
        x = sub.inputs[0]
        rank = rank if rank is not None else x.rank
        if not is_private(exp.inputs[0], exp) or not is_private(sub.inputs[1], sub):
            return 0
        if _single_axis(rmax, rank) != _single_axis(rsum, rank):
            return 0
        axis = _single_axis(rsum, rank)
        dead += [sub, rmax]
    return _replace(graph, div, x, axis, dead)


def _replace(graph: Graph, div: Node, x: Value, axis: int, dead: list[Node]) -> int:
    softmax = new_node(graph, "Softmax", [x], before=div, created_by=NAME,
                       attrs={"axis": int_attr(axis)}, dtype=div.output.dtype,
                       shape=div.output.shape)
    softmax.sem["stable"] = True
    if not replace_value(graph, div.output, softmax.output, inexact=site(NAME, div)):
        graph.remove(softmax)
        return 0
    graph.remove(dead)
    return 1
