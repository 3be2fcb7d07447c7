"""A mean folded into the bias is taken back out: the value is centred, then scaled.

    Add(Mul(x, s), Sub(β, Mul(m, s)))  ->  Add(Mul(Sub(x, m), s), β),   m = ReduceMean(x)

(either operand order in the Muls and the Add; ``β`` a constant).

Why: TensorFlow's ``batch_normalization`` arithmetic, which tf2onnx writes for norms
converted from TensorFlow and JAX, scales first and subtracts the scaled mean inside the
bias: ``x·s + (β − m·s)`` with ``s = rstd·γ``. Every other exporter centres first,
``(x − m)·s + β``, and that is the form the LayerNorm pattern reads. The two are the same
function; the centred one is the more accurate (``x·s`` and ``m·s`` are large and nearly
equal where the spread is small against the mean, and their difference cancels digits).

Only when ``m`` is a ``keepdims`` ReduceMean of this same ``x`` (so the rewrite centres
something, and ``x − m`` broadcasts to ``x``'s shape), the same value ``s`` scales both,
and the two products and the bias difference are read by nothing else.
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
    is_op,
    is_private,
    live_ops,
    new_node,
)
from onnxopt.rewrite.driver import PassResult

NAME = "centered_shift"


# A hand walk, not a pattern (onnxopt.rewrite.pattern): not yet ported: its operand orders are
# tried with conditions between them (dtypes, privacy) that a first-match pattern would not retry,
# so outputs could change.
def centered_shift(model: Model) -> PassResult:
    """Rewrite ``x·s + (β − mean(x)·s)`` into ``(x − mean(x))·s + β``; return how many."""
    return PassResult(sum(_rewrite(graph, node) for graph, node in live_ops(model, "Add")
               if model.exactness.permits(NAME, node)))


def _binary(value: Value, reader: Node, op: str) -> Node | None:
    """The two-operand ``op`` node producing ``value``, when ``reader`` alone reads it."""
    node = value.producer
    if not is_op(node, op) or len(node.inputs) != 2 or None in node.inputs:
        return None
    return node if is_private(value, reader) else None


def _mean_of(m: Value, x: Value) -> bool:
    """``m`` is ``ReduceMean(x)`` keeping the reduced axes."""
    node = m.producer
    return (is_op(node, "ReduceMean") and node.inputs[0] is x
            and bool(node.sem.get("keepdims", True)))


def _split(add: Node) -> tuple[Value, Value, Value, Value, list[Node]] | None:
    """(x, s, m, β, nodes to drop) when ``add`` is ``x·s + (β − m·s)`` in some operand order."""
    for k in (0, 1):
        scaled = _binary(add.inputs[k], add, "Mul")
        shift = _binary(add.inputs[1 - k], add, "Sub")
        if scaled is None or shift is None:
            continue
        beta, mean_scaled = shift.inputs
        if beta.const is None:
            continue
        mul = _binary(mean_scaled, shift, "Mul")
        if mul is None:
            continue
        for x, s in (scaled.inputs, reversed(scaled.inputs)):
            for m, s2 in (mul.inputs, reversed(mul.inputs)):
                if s2 is s and _mean_of(m, x):
                    return x, s, m, beta, [shift, scaled, mul]
    return None


def _rewrite(graph: Graph, add: Node) -> int:
    if len(add.inputs) != 2 or None in add.inputs:
        return 0
    found = _split(add)
    if found is None:
        return 0
    x, s, m, beta, dead = found
    dtype = add.output.dtype
    if dtype is None or not (x.dtype == s.dtype == m.dtype == beta.dtype == dtype):
        return 0
    d = new_node(graph, "Sub", [x, m], before=add, created_by=NAME, dtype=dtype,
                 shape=sd.broadcast_shapes(x.shape, m.shape))
    ds = new_node(graph, "Mul", [d.output, s], before=add, created_by=NAME, dtype=dtype,
                  shape=sd.broadcast_shapes(d.output.shape, s.shape))
    out = new_node(graph, "Add", [ds.output, beta], before=add, created_by=NAME, dtype=dtype,
                   shape=add.output.shape)
    if not replace_value(graph, add.output, out.output, inexact=site(NAME, add)):
        graph.remove([out, ds, d])
        return 0
    remove_if_dead(graph, add, *dead)
    return 1
