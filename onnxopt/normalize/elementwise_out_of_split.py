"""An Add or Mul on a view that splits one axis in two moves out past the Reshape that merges
the axes back, its constant operand merged the same way.

    Reshape(Add(x5, M), [B·nW, H, N, N])      x5: [B, nW, H, N, N], M: [1, nW, 1, N, N]
        ->  Add(Reshape(x5, [B·nW, H, N, N]), Tile(M', [B, 1, 1, 1]))     M': [nW, 1, N, N]

Swin's shifted windows add their per-window mask on a 5-D view of the ``[B·nW, H, N, N]``
scores (the view splits batch·windows so the mask broadcasts over the batch), then merge it
back: attention's Add is hidden between two Reshapes. Moving the elementwise ops out of the
split/merge pair lets the two Reshapes meet (``merge_reshapes`` folds them, ``remove_noops``
drops the identity) and the mask sits where every other exporter puts it.

The merged operand is exact: merging axes ``a, a+1`` is row-major, so merged index
``i·n + j`` reads ``M[…, i, j, …]``. Where ``M`` is 1 along both axes, or full along both, it
is only reshaped (a new constant of the same bytes); where it is 1 along ``a`` and full along
``a+1`` (per window, the same for every batch), it is reshaped to the ``n`` windows and tiled
``a``'s size times — a ``Tile`` whose repeats read that size from the shape at run time
when it is symbolic. A computed operand of known static shape (TorchScript builds Swin's mask
from constants with ops that are not folded, since folding would store a larger tensor) is
merged the same way by a ``Reshape`` node instead of a new constant. Other operands (unknown
shapes, partial broadcasts) stay where they are.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Node
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Value
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.normalize._common import (
    int_attr,
    is_private,
    small_constant,
)
from onnxopt.rewrite.pattern import PatternRewrite, case

NAME = "elementwise_out_of_split"
OPS = ("Add", "Mul")


def _merge_of_elementwise(p: Builder) -> Pat:
    """Reshape(Add|Mul(a, b), target) (which operand is the constant: ``_operands``)."""
    operands = (p.maybe(p.var("a")), p.maybe(p.var("b")))
    op = p.any(*(p.op(name, *operands, name="op", commutative=False, other_inputs=True,
                      other_attrs=True) for name in OPS))
    return p.Reshape(op, p.var("target"), name="merge", other_inputs=True, other_attrs=True)


def _move_out(graph: Graph, m: Match) -> bool:
    """What the pattern cannot say: the elementwise result read by the merge alone, and the
    symbolic-shape proof that the merge undoes a split the constant operand broadcasts on."""
    merge, op = m.merge, m.op
    if not is_private(op.output, merge):
        return False
    axis = merged_axis(op.output.shape, merge.output.shape)
    found = _operands(op) if axis is not None else None
    if found is None or merge.output in graph.output_set():
        return False
    x, c = found
    layout = _laid_out(c, x, axis)
    if layout is None:
        return False
    build = NodeBuilder(graph, merge, NAME, by_op=True)
    inner = build.node("Reshape", [x, merge.input(1)], attrs=dict(merge.attrs), dtype=x.dtype,
                       shape=merge.output.shape)
    merged = _merged_operand(graph, merge, layout, c, x, inner.output, axis)
    moved = build.node(op.op_type, [inner.output, merged], dtype=merge.output.dtype,
                       shape=merge.output.shape)
    graph.replace_all_uses(merge.output, moved.output)
    graph.remove(merge)
    graph.remove(op)
    return True


def merged_axis(split, merged) -> int | None:
    """``a`` when ``merged`` is ``split`` with axes ``a`` and ``a+1`` merged. The merged dim
    and the first split one may be unknown where every other dim is a positive number: the
    element count, the same on both sides, then fixes the merged dim to their product."""
    if split is None or merged is None or len(split) != len(merged) + 1:
        return None
    for a in range(len(merged)):
        rest = list(zip(split[:a], merged[:a])) + list(zip(split[a + 2:], merged[a + 1:]))
        if not all(x is not None and sd.same(x, y) for x, y in rest):
            continue
        if None not in (merged[a], split[a], split[a + 1]) and sd.same(
                merged[a], sd.mul(split[a], split[a + 1])):
            return a
        if (merged[a] is None and split[a] is None and isinstance(split[a + 1], int)
                and split[a + 1] > 0 and all(isinstance(x, int) and x > 0 for x, _ in rest)):
            return a
    return None


def _static_shape(m: Value) -> tuple[int, ...] | None:
    """The operand's shape: a constant's, or a computed value's when every dim is a number."""
    if m.const is not None:
        return tuple(m.const.shape)
    if m.shape is not None and all(isinstance(d, int) and d >= 0 for d in m.shape):
        return tuple(m.shape)
    return None


def _operands(op: Node) -> tuple[Value, Value] | None:
    """(the view, the operand) when one operand is the full-shaped view and the other a
    constant, or a value of static shape, that broadcasts into it without enlarging it."""
    out = op.output.shape
    for i in (0, 1):
        x, m = op.inputs[i], op.inputs[1 - i]
        if x is None or m is None or x.const is not None or m.const is None and m is x:
            continue
        mshape = _static_shape(m)
        if mshape is None or x.shape is None or len(x.shape) != len(out) or x.dtype != m.dtype:
            continue
        if len(mshape) > len(out):
            continue
        dims = (1,) * (len(out) - len(mshape)) + mshape
        # The view keeps its shape where the operand is 1 or equally long: no enlarging.
        if all(d == 1 or sd.same(x_dim, d) for x_dim, d in zip(x.shape, dims)):
            return x, m
    return None


def _laid_out(m: Value, x: Value, a: int) -> tuple[int, ...] | None:
    """``m``'s shape at ``x``'s rank, when it merges along ``a, a+1`` (see the docstring)."""
    mshape = _static_shape(m)
    if mshape is None or (m.const is not None and small_constant(m) is None):
        return None
    shape = x.shape
    layout = (1,) * (len(shape) - len(mshape)) + mshape
    ma, mb = layout[a], layout[a + 1]
    if (ma, mb) == (1, 1) or (sd.same(ma, shape[a]) and sd.same(mb, shape[a + 1])):
        return layout
    if ma == 1 and sd.same(mb, shape[a + 1]):
        return layout  # per window: tiled
    return None  # a broadcast along the second axis only: not a plain merge


def _merged_operand(graph: Graph, merge: Node, layout: tuple[int, ...], m: Value, x: Value,
                    merged_view: Value, a: int) -> Value:
    shape = x.shape
    ma, mb = layout[a], layout[a + 1]
    head, tail = layout[:a], layout[a + 2:]
    target = head + (ma * mb,) + tail
    build = NodeBuilder(graph, merge, NAME, by_op=True)
    if m.const is not None:
        merged = _constant(graph, small_constant(m).reshape(target), m)
    else:
        to = graph.add_constant(LazyTensor.from_array(np.array(target, np.int64)),
                                hint=f"{NAME}/operand_shape")
        merged = build.node("Reshape", [m, to], dtype=m.dtype, shape=target).output
    if ma == mb == 1 or ma != 1 or sd.same(shape[a], 1):
        return merged
    repeats = _repeats(graph, merge, merged_view, a, mb, len(shape) - 1)
    tiled = build.node("Tile", [merged, repeats], dtype=m.dtype,
                       shape=tuple(head) + (sd.mul(shape[a], mb),) + tuple(tail))
    return tiled.output


def _constant(graph: Graph, arr: np.ndarray, like: Value) -> Value:
    return graph.add_constant(LazyTensor.from_array(np.ascontiguousarray(arr)),
                              hint=f"{like.name}_merged")


def _repeats(graph: Graph, merge: Node, merged_view: Value, a: int, per: int,
             rank: int) -> Value:
    """``[1, …, n, …, 1]`` with ``n`` = the merged axis' size / ``per``: a constant where it is
    known, else read from the merged view's shape (the split view's own shape would give the
    split Reshape a second reader and keep it from folding away)."""
    size = merged_view.shape[a]
    if isinstance(size, int):
        ones = np.ones(rank, np.int64)
        ones[a] = size // per
        return graph.add_constant(LazyTensor.from_array(ones), hint=f"{NAME}/repeats")
    build = NodeBuilder(graph, merge, NAME, by_op=True)
    shape = build.node("Shape", [merged_view], dtype="int64", shape=(rank,))
    index = graph.add_constant(LazyTensor.from_array(np.array([a], np.int64)), hint=f"{NAME}/axis")
    rows = build.node("Gather", [shape.output, index], dtype="int64", shape=(1,))
    per_value = graph.add_constant(LazyTensor.from_array(np.array([per], np.int64)),
                                   hint=f"{NAME}/per")
    count = build.node("Div", [rows.output, per_value], dtype="int64", shape=(1,))
    parts = [(graph.add_constant(LazyTensor.from_array(np.ones(a, np.int64)), hint=f"{NAME}/ones"), a),
             (count.output, 1),
             (graph.add_constant(LazyTensor.from_array(np.ones(rank - a - 1, np.int64)),
                                 hint=f"{NAME}/ones"), rank - a - 1)]
    pieces = [value for value, n in parts if n]
    if len(pieces) == 1:
        return pieces[0]
    return build.node("Concat", pieces, attrs={"axis": int_attr(0)}, dtype="int64",
                      shape=(rank,)).output


elementwise_out_of_split = PatternRewrite.of(
    case(_merge_of_elementwise, ("Reshape",), _move_out))
