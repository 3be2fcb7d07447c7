"""Shared legality predicates: each returns ``None`` or a :class:`~onnxopt.refusal.Refusal`
whose sentence names the value at fault.

These are the reasons ``onnxopt explain`` prints, so each says what is wrong
and where, in words a model author understands; the code (``used_outside_match``,
``not_last_axis``, …) is what reports group by and tests assert.
"""

from __future__ import annotations

from collections.abc import Iterable

from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.legality.target import Target
from onnxopt.refusal import Refusal

SHAPE_READERS = frozenset({"Shape", "Size"})


def used_outside(nodes: Iterable[Node], root: Node, exposed: Iterable[Value] = ()
                 ) -> Refusal | None:
    """An intermediate of the match is read by a node outside it, or is a graph output.

    A reader that only looks at the shape (Shape, Size) does not count: the
    intermediate's producer then simply stays in the graph for it, and dead
    code elimination removes it once nothing reads it. ``exposed``: intermediates the
    fused op outputs too, which may be read anywhere.
    """
    nodes = list(nodes)
    inside = {id(n) for n in nodes}
    skip = {id(v) for v in exposed}
    for node in nodes:
        if node is root:
            continue
        graph = node.graph
        for out in node.outputs:
            if id(out) in skip:
                continue
            if graph is not None and out in graph.output_set():
                return Refusal("intermediate_is_graph_output",
                               f"%{out.name} is a graph output, so it must stay computed",
                               f"%{out.name}")
            for user, _ in out.uses():
                if id(user) not in inside and user.op_type not in SHAPE_READERS:
                    return Refusal("used_outside_match",
                                   f"%{out.name} is also used by {user.name} ({user.op_type}) "
                                   "outside the match", f"%{out.name}")
    return None


def not_scalar_constant(value: Value, what: str) -> Refusal | None:
    """Why ``value`` is not a one-element constant (a reason, or None when it is one)."""
    if value.const is None:
        return Refusal("not_a_constant", f"%{value.name}: the {what} is computed at run time, "
                       "not a constant", f"%{value.name}")
    if value.const.size != 1:
        return Refusal("not_a_scalar", f"%{value.name}: the {what} is not a scalar (shape "
                       f"{list(value.const.shape)})", f"%{value.name}")
    return None


def last_axis(node: Node, what: str) -> Refusal | None:
    """``node`` reduces over the last axis of its input."""
    axes = node.sem.get("axes")
    x = node.inputs[0]
    rank = x.rank
    if axes in (None, "dynamic") or rank is None:
        return Refusal("axis_unknown", f"{node.name}: cannot tell which axis the {what} runs "
                       "over", node.name)
    if tuple(axes) != (rank - 1,):
        return Refusal("not_last_axis", f"{node.name}: the {what} runs over axis {list(axes)}, "
                       f"not the last axis ({rank - 1})", node.name)
    return None


def reduction_order(target: Target, what: str) -> Refusal | None:
    """Under strict determinism, a fused kernel may not reorder a reduction."""
    if target.determinism == "strict":
        return Refusal("strict_determinism",
                       f"determinism is strict, and a fused {what} may change the order of its "
                       "floating-point reductions")
    return None
