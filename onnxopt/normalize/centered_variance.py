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
from onnxopt.ir.edit import remove_if_dead, rename, replace_value
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
    square_of,
)
from onnxopt.rewrite.driver import PassResult

NAME = "centered_variance"


# A hand walk, not a pattern (onnxopt.rewrite.pattern): not yet ported: its operand orders are
# tried with conditions between them (dtypes, privacy) that a first-match pattern would not retry,
# so outputs could change.
def centered_variance(model: Model) -> PassResult:
    """Rewrite clamped one-pass variances into means of centred squares; return how many."""
    return PassResult(sum(_rewrite(graph, node) for graph, node in live_ops(model, "Max")
               if model.exactness.permits(NAME, node)))


def _clamped(max_node: Node) -> Value | None:
    """The operand of ``Max(v, 0)`` / ``Max(0, v)`` that is clamped, when the zero is a scalar
    constant of no higher rank than ``v`` (so the Max broadcasts nothing)."""
    if len(max_node.inputs) != 2 or None in max_node.inputs:
        return None
    for k in (1, 0):
        zero, v = max_node.inputs[k], max_node.inputs[1 - k]
        if float_scalar(zero) == 0.0 and v.rank is not None and len(zero.shape or ()) <= v.rank:
            return v
    return None


def _same_mean(a: Node, b: Node) -> bool:
    """Two ReduceMeans over the same known axes, both keeping the reduced axes."""
    axes = a.sem.get("axes")
    return (axes != "dynamic" and axes == b.sem.get("axes")
            and a.sem.get("keepdims", True) and b.sem.get("keepdims", True))


def _rewrite(graph: Graph, max_node: Node) -> int:
    diff = _clamped(max_node)
    if diff is None or not is_private(diff, max_node):
        return 0
    sub = diff.producer
    if not is_op(sub, "Sub") or len(sub.inputs) != 2 or None in sub.inputs:
        return 0
    mean_sq, mean_2 = sub.inputs
    if not (is_private(mean_sq, sub) and is_private(mean_2, sub)):
        return 0
    sq_reduce, mean = mean_sq.producer, square_of(mean_2)
    if not is_op(sq_reduce, "ReduceMean") or mean is None or not is_op(mean.producer, "ReduceMean"):
        return 0
    squares = sq_reduce.inputs[0]
    x = square_of(squares) if squares is not None else None
    if x is None or x is not mean.producer.inputs[0] or not is_private(squares, sq_reduce):
        return 0
    if not _same_mean(sq_reduce, mean.producer):
        return 0
    if x.dtype is None or not (x.dtype == mean.dtype == diff.dtype == max_node.output.dtype):
        return 0
    shape = sd.broadcast_shapes(x.shape, mean.shape)
    d = new_node(graph, "Sub", [x, mean], before=max_node, created_by=NAME, dtype=x.dtype,
                 shape=shape)
    # named for what it is: a match refused for its readers names it (``explain``)
    rename(graph, d.output, graph.names.fresh(f"{x.name}_centered"))
    d2 = new_node(graph, "Mul", [d.output, d.output], before=max_node, created_by=NAME,
                  dtype=x.dtype, shape=shape)
    var = new_node(graph, "ReduceMean", [d2.output, *sq_reduce.inputs[1:]], before=max_node,
                   created_by=NAME, attrs=dict(sq_reduce.attrs), dtype=x.dtype,
                   shape=max_node.output.shape)
    if not replace_value(graph, max_node.output, var.output, inexact=site(NAME, max_node)):
        graph.remove([var, d2, d])
        return 0
    remove_if_dead(graph, max_node, sub, sq_reduce, mean_2.producer, squares.producer)
    return 1
