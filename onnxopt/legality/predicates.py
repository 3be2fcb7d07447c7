"""Shared legality predicates: each returns ``None`` or a sentence naming the value at fault.

These are the reasons ``onnxopt explain`` prints, so each says what is wrong
and where, in words a model author understands.
"""

from __future__ import annotations

from collections.abc import Iterable

from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.legality.target import Target

SHAPE_READERS = frozenset({"Shape", "Size"})


def used_outside(nodes: Iterable[Node], root: Node) -> str | None:
    """An intermediate of the match is read by a node outside it, or is a graph output.

    A reader that only looks at the shape (Shape, Size) does not count: the
    intermediate's producer then simply stays in the graph for it, and dead
    code elimination removes it once nothing reads it.
    """
    inside = {id(n) for n in nodes}
    for node in nodes:
        if node is root:
            continue
        graph = node.graph
        for out in node.outputs:
            if graph is not None and out in graph.output_set():
                return f"%{out.name} is a graph output, so it must stay computed"
            for user, _ in out.uses():
                if id(user) not in inside and user.op_type not in SHAPE_READERS:
                    return f"%{out.name} is also used by {user.name} ({user.op_type}) outside the match"
    return None


def not_scalar_constant(value: Value, what: str) -> str | None:
    """Why ``value`` is not a one-element constant (a reason, or None when it is one)."""
    if value.const is None:
        return f"%{value.name}: the {what} is computed at run time, not a constant"
    if value.const.size != 1:
        return f"%{value.name}: the {what} is not a scalar (shape {list(value.const.shape)})"
    return None


def last_axis(node: Node, what: str) -> str | None:
    """``node`` reduces over the last axis of its input."""
    axes = node.sem.get("axes")
    x = node.inputs[0]
    rank = x.rank
    if axes in (None, "dynamic") or rank is None:
        return f"{node.name}: cannot tell which axis the {what} runs over"
    if tuple(axes) != (rank - 1,):
        return (f"{node.name}: the {what} runs over axis {list(axes)}, not the last axis "
                f"({rank - 1})")
    return None


def reduction_order(target: Target, what: str) -> str | None:
    """Under strict determinism, a fused kernel may not reorder a reduction."""
    if target.determinism == "strict":
        return (f"determinism is strict, and a fused {what} may change the order of its "
                "floating-point reductions")
    return None
