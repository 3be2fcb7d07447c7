"""A variance spelled E[x²] − E[x]², clamped at 0, becomes the mean of centred squares.

    Max(Sub(ReduceMean(x·x), m·m), 0)  ->  ReduceMean(d·d),  m = ReduceMean(x), d = x − m

(``x·x`` may be ``Pow(x, 2)``, ``m·m`` may be ``Pow(m, 2)``, the zero may come first.)

Why: flax's ``nn.LayerNorm`` computes its statistics in one pass, ``var = max(0,
mean(x²) − mean(x)²)``, and jax2tf + tf2onnx write exactly that. PyTorch, ONNX's own
``LayerNormalization`` and the LayerNorm pattern centre first, ``mean((x − mean(x))²)``;
with this form one pattern covers both. The rewrite is numerically at least as good: the
one-pass form loses the digits that E[x²] and E[x]² share when the mean is large against
the spread (hence flax's clamp), the centred form has no such cancellation and is never
negative, so the clamp has nothing left to do.

It fires only when the result is the same function: the clamp is with a zero constant
that broadcasts nothing, both reductions are ReduceMeans over the same known axes with
``keepdims=1`` (so ``x − m`` lines up element by element), and ``x·x``, ``E[x²]``,
``m·m`` and the difference are read by nothing else — otherwise they would be computed
anyway and the rewrite would add work. The mean ``m`` itself may have other readers: the
centred value ``x − m`` is what a LayerNorm goes on to scale, and common-subexpression
elimination merges the two subtractions.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import remove_if_dead, rename, replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Node
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.normalize._common import float_scalar, square
from onnxopt.rewrite.pattern import PatternRewrite, case

NAME = "centered_variance"


def _pattern(p: Builder) -> Pat:
    """Max(Sub(ReduceMean(x²), m²), zero) in either order, m = ReduceMean(x); every
    intermediate but ``m`` read by the next node alone."""
    x = p.var("x")
    mean = p.ReduceMean(x, name="mean", other_inputs=True, other_attrs=True)
    mean_sq = p.ReduceMean(square(p, x, "x", private=True), name="sq_reduce", private=True,
                           other_inputs=True, other_attrs=True)
    diff = p.Sub(mean_sq, square(p, mean, "mean", private=True), name="sub", private=True,
                 other_attrs=True)
    return p.Max(diff, p.var("zero"), other_attrs=True)


def _fits(m: Match) -> bool:
    """What the pattern cannot say: the clamp is with a zero that broadcasts nothing, both
    means reduce the same known axes keeping them, and every dtype agrees."""
    diff, zero = m.sub.output, m.zero
    if float_scalar(zero) != 0.0 or diff.rank is None or len(zero.shape or ()) > diff.rank:
        return False
    if not _same_mean(m.sq_reduce, m.mean):
        return False
    x, mean = m.x, m.mean.output
    return x.dtype is not None and x.dtype == mean.dtype == diff.dtype == m.root.output.dtype


def _same_mean(a: Node, b: Node) -> bool:
    """Two ReduceMeans over the same known axes, both keeping the reduced axes."""
    axes = a.sem.get("axes")
    return (axes != "dynamic" and axes == b.sem.get("axes")
            and a.sem.get("keepdims", True) and b.sem.get("keepdims", True))


def _rewrite(graph: Graph, m: Match) -> bool:
    max_node, sub, sq_reduce, x = m.root, m.sub, m.sq_reduce, m.x
    mean = m.mean.output
    squares, mean_2 = sq_reduce.inputs[0], sub.inputs[1]
    shape = sd.broadcast_shapes(x.shape, mean.shape)
    build = NodeBuilder(graph, max_node, NAME, by_op=True)
    d = build.node("Sub", [x, mean], dtype=x.dtype, shape=shape)
    # named for what it is: a match refused for its readers names it (``explain``)
    rename(graph, d.output, graph.names.fresh(f"{x.name}_centered"))
    d2 = build.node("Mul", [d.output, d.output], dtype=x.dtype, shape=shape)
    var = build.node("ReduceMean", [d2.output, *sq_reduce.inputs[1:]], attrs=dict(sq_reduce.attrs),
                     dtype=x.dtype, shape=max_node.output.shape)
    if not replace_value(graph, max_node.output, var.output, inexact=site(NAME, max_node)):
        graph.remove([var, d2, d])
        return False
    remove_if_dead(graph, max_node, sub, sq_reduce, mean_2.producer, squares.producer)
    return True


# Not bit-exact (the variance summed in another form): a site of onnxopt.ir.exactness.
centered_variance = PatternRewrite.of(case(_pattern, ("Max",), _rewrite, permits=NAME,
                                           require=_fits))
