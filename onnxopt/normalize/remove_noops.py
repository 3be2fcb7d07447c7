"""No-op removal: nodes whose output equals one of their inputs (or an earlier value).

Why: exporters wrap values in operations that compute nothing — TorchScript's
``Identity`` on every parameter alias, ``Dropout`` left in an inference graph,
``Cast`` to the type a value already has, ``Mul`` by 1 from a folded scale,
``Reshape``/``Expand`` to the shape the value already has, ``Unsqueeze`` undone
by ``Squeeze``, ``Pad`` by zero (Swin pads to a multiple of its window with amounts
computed from the shape, which fold to zeros when the size already is one; the
padded value's shape would otherwise be unknown to everything after it). Each is a node a pattern would have to step over; removed, the
graph says what it means.

Each check below returns the value the node's output is equal to, or ``None``.
"Equal" means equal in value, dtype and shape: a no-op that could broadcast
(``x + 0`` with a constant of higher rank, a ``Reshape`` whose output shape is
not known) is kept. Shapes are compared as recorded on Values, dimension by
dimension, with symbols (``batch``) equal only to themselves and unknown
dimensions never equal to anything.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxopt.ir.dtypes import dtype_name
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.normalize._common import (
    STANDARD_DOMAINS,
    is_op,
    same_known_shape,
    scalar_constant,
    small_constant,
)
from onnxopt.rewrite.driver import PassResult

NAME = "remove_noops"


# A hand walk, not a pattern (onnxopt.rewrite.pattern): per op, a check that the output equals an
# input in value, dtype and shape: facts of values one node deep, nothing a producer tree says.
def remove_noops(model: Model) -> PassResult:
    """Forward the readers of every no-op's output to the value it equals; remove the node."""
    count = 0
    for graph in model.graph.all_graphs():
        for node in graph:
            if node.domain not in STANDARD_DOMAINS:
                continue
            check = _CHECKS.get(node.op_type)
            if check is None:
                continue
            same = check(node)
            if same is None:
                continue
            inexact = site(NAME, node) if _flips_a_zero(node) else None
            if inexact is not None and not model.exactness.permits(NAME, node):
                continue
            if _forward(graph, node, same, inexact):
                count += 1
    return PassResult(count)


def _flips_a_zero(node: Node) -> bool:
    """``x + 0`` (and ``x - (-0)``) is ``x`` except for one number: ``-0 + 0`` is ``+0``. Only
    ``x + (-0)`` and ``x - 0`` give ``x`` bit for bit; the others are sites of
    :mod:`onnxopt.ir.exactness` (kept where the zero's sign cannot reach an output unfused)."""
    if node.op_type not in ("Add", "Sub"):
        return False
    for v in node.inputs:
        arr = small_constant(v, 1 << 16)
        if arr is not None and arr.dtype.kind == "f" and arr.size and not np.any(arr):
            return not np.all(np.signbit(arr) == (node.op_type == "Add"))
    return False


def _forward(graph: Graph, node: Node, same: Value, inexact: str | None) -> bool:
    out = node.outputs[0]
    if any(o.num_uses or o.is_graph_output for o in node.outputs[1:]):
        return False  # e.g. a Dropout mask somebody reads
    upstream = node.inputs[0].producer if node.inputs and node.inputs[0] is not None else None
    if not replace_value(graph, out, same, inexact=inexact):
        return False
    remove_if_dead(graph, node, upstream)
    return True


def _identity(node: Node) -> Value | None:
    return node.inputs[0] if node.inputs else None


def _dropout(node: Node) -> Value | None:
    training = node.input(2)
    if training is not None and scalar_constant(training) is not False:
        return None  # training mode (or unknown): Dropout is random
    return node.inputs[0]


def _cast(node: Node) -> Value | None:
    x = node.inputs[0]
    to = node.attr("to")
    if x is None or x.dtype is None or to is None or dtype_name(to) != x.dtype:
        return None
    return x


def _cast_like(node: Node) -> Value | None:
    x, like = node.input(0), node.input(1)
    if x is None or like is None or x.dtype is None or x.dtype != like.dtype:
        return None
    return x


# op -> (identity element, positions the non-constant operand may take)
_ARITH = {"Add": (0, (0, 1)), "Sub": (0, (0,)), "Mul": (1, (0, 1)), "Div": (1, (0,))}


def _arith(node: Node) -> Value | None:
    identity, positions = _ARITH[node.op_type]
    if len(node.inputs) != 2:
        return None
    for xi in positions:
        x, c = node.inputs[xi], node.inputs[1 - xi]
        arr = small_constant(c, 1 << 16)
        if x is None or arr is None or arr.dtype.kind not in "iuf" or not np.all(arr == identity):
            continue
        if same_known_shape(node.output.shape, x.shape):
            return x
        if arr.size == 1 and x.rank is not None and arr.ndim <= x.rank:
            return x  # a one-element constant of no higher rank cannot broadcast x any larger
    return None


def _transpose(node: Node) -> Value | None:
    perm = node.attr("perm", node.sem.get("perm"))
    if perm is None or list(perm) != list(range(len(perm))):
        return None
    return node.inputs[0]


def _same_shape(node: Node) -> Value | None:
    x = node.inputs[0]
    if x is None or not same_known_shape(node.output.shape, x.shape):
        return None
    if x.dtype is not None and node.output.dtype not in (None, x.dtype):
        return None
    return x


def _reshape_to_itself(node: Node) -> Value | None:
    """A Reshape whose output is its input: the same known shape, or a constant target that
    keeps every dim (each a copy ``0`` without allowzero, or the input's own positive number)
    but at most one ``-1``, which the element count then fixes to the remaining dim."""
    if (x := _same_shape(node)) is not None:
        return x
    x, target = node.inputs[0], small_constant(node.input(1), 64)
    if x is None or x.shape is None or target is None or target.ndim != 1:
        return None
    dims = target.tolist()
    if len(dims) != len(x.shape) or dims.count(-1) > 1:
        return None
    if x.dtype is not None and node.output.dtype not in (None, x.dtype):
        return None
    for d, own in zip(dims, x.shape):
        kept = (d == 0 and not node.attr("allowzero", 0)) or (d > 0 and own == d)
        if not kept and d != -1:
            return None
    if -1 in dims and not all(isinstance(own, int) and own > 0
                              for d, own in zip(dims, x.shape) if d != -1):
        return None  # a zero-sized dim beside the -1 would leave it undetermined
    return x


def _axes(node: Node) -> list[int] | None:
    axes = node.attr("axes")
    if axes is None:
        v = node.input(1)
        arr = small_constant(v, 64)
        if arr is None:
            return None
        axes = arr.reshape(-1).tolist()
    return [int(a) for a in axes]


def _normalized(axes: list[int] | None, rank: int | None) -> set[int] | None:
    if axes is None:
        return None
    if any(a < 0 for a in axes):
        if rank is None:
            return None
        axes = [a + rank if a < 0 else a for a in axes]
    return set(axes) if len(set(axes)) == len(axes) else None


def _squeeze(node: Node) -> Value | None:
    """Squeeze(Unsqueeze(x, axes), axes) -> x."""
    inner = node.inputs[0].producer if node.inputs[0] is not None else None
    if not is_op(inner, "Unsqueeze") or inner.inputs[0] is None:
        return None
    x = inner.inputs[0]
    u_axes = _axes(inner)
    rank = None if x.rank is None or u_axes is None else x.rank + len(u_axes)
    a, b = _normalized(u_axes, rank), _normalized(_axes(node), rank)
    return x if a is not None and a == b else None


def _unsqueeze(node: Node) -> Value | None:
    """Unsqueeze(Squeeze(x, axes), axes) -> x (the squeezed dims were 1, or Squeeze failed)."""
    inner = node.inputs[0].producer if node.inputs[0] is not None else None
    if not is_op(inner, "Squeeze") or inner.inputs[0] is None:
        return None
    x = inner.inputs[0]
    a, b = _normalized(_axes(inner), x.rank), _normalized(_axes(node), x.rank)
    return x if a is not None and a == b else None


def _pad(node: Node) -> Value | None:
    """Pad by zero on every side, whatever the mode (the IR gives every opset's pads as an
    input)."""
    pads = small_constant(node.input(1), 1 << 10) if node.input(1) is not None else None
    if pads is None or pads.dtype.kind not in "iu" or np.any(pads != 0):
        return None
    return node.inputs[0]


def _where(node: Node) -> Value | None:
    cond = small_constant(node.input(0), 1 << 20)
    if cond is None or cond.dtype != np.bool_ or len(node.inputs) != 3:
        return None
    if cond.all():
        chosen = node.inputs[1]
    elif not cond.any():
        chosen = node.inputs[2]
    else:
        return None
    return chosen if same_known_shape(node.output.shape, chosen.shape) else None


_CHECKS: dict[str, Callable[[Node], Value | None]] = {
    "Identity": _identity,
    "Dropout": _dropout,
    "Cast": _cast,
    "CastLike": _cast_like,
    "Add": _arith,
    "Sub": _arith,
    "Mul": _arith,
    "Div": _arith,
    "Transpose": _transpose,
    "Reshape": _reshape_to_itself,
    "Expand": _same_shape,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Where": _where,
    "Pad": _pad,
}
