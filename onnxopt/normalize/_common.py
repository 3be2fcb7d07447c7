"""Small helpers the normalization passes share.

Each pass lives in its own file and reads top to bottom; what several of them
need — "is this a standard-domain op", "is this operand a scalar constant",
"is this a square" (as a test and as a pattern) — lives here once, so that the
passes differ only in what they rewrite. New nodes come from the one builder,
``onnxopt.ir.builder.NodeBuilder`` (``by_op=True``: named by their op type). What other stages need too lives below,
in the IR: the walk over every graph (``Graph.all_graphs``), the broadcast of
symbolic shapes (``ir.symdim.broadcast_shapes``, the rule shape inference uses)
and the dead-node remover (``ir.edit.remove_if_dead``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
from onnx import AttributeProto

from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Attr, Node
from onnxopt.ir.semantics import STANDARD_DOMAINS
from onnxopt.ir.value import Shape, Value
from onnxopt.match.pattern import Builder, Pat
from onnxopt.refusal import Refusal


def is_op(node: Node | None, *op_types: str) -> bool:
    """``node`` is a standard-domain node of one of ``op_types``."""
    return node is not None and node.domain in STANDARD_DOMAINS and node.op_type in op_types


def live_ops(model: Model, *op_types: str) -> Iterator[tuple[Graph, Node]]:
    """(graph, node) for every standard-domain node of ``op_types`` in every graph: each graph
    walked over a snapshot, skipping nodes that a rewrite earlier in the walk removed."""
    for graph in model.graph.all_graphs():
        for node in list(graph):
            if node.graph is graph and is_op(node, *op_types):
                yield graph, node


def is_private(value: Value, reader: Node) -> bool:
    """``value`` is read by ``reader`` alone (once) and is not a graph output."""
    uses = value._uses
    return len(uses) == 1 and uses[0][0] is reader and not value.is_graph_output


def small_constant(value: Value | None, max_size: int = 1 << 20) -> np.ndarray | None:
    """The numbers of a constant with at most ``max_size`` elements, else ``None``."""
    if value is None or value.const is None or value.const.size > max_size:
        return None
    if value.const.dtype == "string":
        return None
    return value.const.numpy()


def scalar_constant(value: Value | None) -> float | int | bool | None:
    """The value of a one-element constant (any all-ones shape), else ``None``."""
    arr = small_constant(value, 1)
    if arr is None or arr.size != 1:
        return None
    return arr.reshape(()).item()


def float_scalar(value: Value | None) -> float | None:
    """The value of a one-element floating-point constant, else ``None``."""
    if value is None or value.const is None or value.const.dtype not in FLOAT_TYPES:
        return None
    v = scalar_constant(value)
    return None if v is None else float(v)


def scalar_operand(node: Node) -> tuple[int, float] | None:
    """For a binary node: (index of the float scalar-constant operand, its value), else ``None``.

    The second operand is preferred, so ``Mul(c1, c2)`` reads as "x=c1, scale=c2".
    """
    if len(node.inputs) != 2:
        return None
    for k in (1, 0):
        v = float_scalar(node.inputs[k])
        if v is not None and node.inputs[1 - k] is not None:
            return k, v
    return None


def square_of(value: Value) -> Value | None:
    """``v`` when ``value`` is ``v·v`` or ``Pow(v, 2)`` (an exponent that broadcasts nothing)."""
    node = value.producer
    if not is_op(node, "Mul", "Pow") or len(node.inputs) != 2 or None in node.inputs:
        return None
    base, other = node.inputs
    if node.op_type == "Mul":
        return base if other is base else None
    if scalar_constant(other) != 2 or base.rank is None or len(other.shape or ()) > base.rank:
        return None
    return base


def power_of(exponent: int) -> Callable[[Node], Refusal | None]:
    """An :class:`~onnxopt.match.pattern.Op` ``check`` for ``Pow(v, e)``: ``e`` a one-element
    constant equal to ``exponent`` that broadcasts ``v`` to nothing (no higher rank)."""
    def check(node: Node) -> Refusal | None:
        base, e = node.input(0), node.input(1)
        if (base is None or scalar_constant(e) != exponent or base.rank is None
                or len(e.shape or ()) > base.rank):
            return Refusal("constant_value", f"not a power {exponent} that broadcasts nothing",
                           node.name)
        return None
    return check


def square(p: Builder, x: Pat, label: str, *, private: bool = False) -> Pat:
    """``x·x`` or ``Pow(x, 2)`` (:func:`square_of` as a pattern; ``label`` names the
    exponent's variable, so that two squares in one pattern bind apart)."""
    return p.any(p.Mul(x, x, private=private, other_attrs=True),
                 p.Pow(x, p.var(f"{label}_exponent"), check=power_of(2), private=private,
                       other_attrs=True))


def known_shape(shape: Shape) -> bool:
    """Every dimension is an int or a symbol (none unknown)."""
    return shape is not None and all(d is not None for d in shape)


def static_shape(shape: Shape) -> bool:
    """Every dimension is an int."""
    return shape is not None and all(isinstance(d, int) for d in shape)


def same_known_shape(a: Shape, b: Shape) -> bool:
    """``a`` and ``b`` are fully known (ints or symbols) and equal dimension by dimension."""
    return known_shape(a) and known_shape(b) and tuple(a) == tuple(b)


_INT_MAX = (2**31 - 1, 2**63 - 1)


def ort_slice(dim: int, start: int, end: int, step: int) -> slice:
    """The Python slice that ONNX Runtime's Slice takes on an axis of size ``dim``: bounds
    clamped per the step's direction, and INT_MAX as an end meaning "to the end" whichever
    way the step goes (ORT's reading, which the ONNX spec's clamping alone would not give)."""
    if end in _INT_MAX:
        end = dim if step > 0 else -dim - 1
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if dim == 0:
        return slice(0, 0)
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return slice(start, end if end >= 0 else None, step)


def int_attr(value: int) -> Attr:
    return Attr(AttributeProto.INT, int(value))


def ints_attr(values: Iterable[int]) -> Attr:
    return Attr(AttributeProto.INTS, tuple(int(v) for v in values))
