"""Attention computed on merged batch×heads views becomes 4-D again.

Some models run attention on 3-D views. BLOOM reshapes Q, K and V from ``[B, H, S, D]``
to ``[B*H, S, D]``, computes the scores with a batched MatMul, adds its ALiBi bias of
``[B*H, 1, S]`` and only then splits the scores back to ``[B, H, S, S]`` for the mask and
Softmax; the probabilities are merged again for P·V and split once more. The attention
rule sees no 4-D chain there. A split that undoes a merge of the two leading axes is
hoisted over the computation between them:

    Reshape(f(Reshape(a, merge), Reshape(b, merge), c), split)  ->  f(a, b, Reshape(c, split))

``f`` is built from MatMul (the leading axes are batch axes) and elementwise
Add/Sub/Mul/Div. Proof obligations, checked on symbolic shapes: the split turns
``[M, x, y]`` into ``[d0, d1, x, y]`` with ``M = d0·d1``; every merge turns ``[d0, d1, x, y]``
into ``[d0·d1, x, y]`` with the same ``d0, d1``; every other operand either broadcasts the
same way in 3-D and 4-D (rank ≤ 2, or a leading 1) or has the merged axis and is split
like the result; every intermediate has no other reader. At least one merge must be
among the operands (otherwise nothing is undone).
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import STANDARD_DOMAINS, Node
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Value
from onnxopt.normalize._common import int_attr, is_op, live_ops
from onnxopt.rewrite.driver import PassResult

CREATED_BY = "unmerge_heads"

ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div"})


# A hand walk, not a pattern (onnxopt.rewrite.pattern): a computation of any size between a merge
# and a split (MatMuls and elementwise ops), walked to its edges: patterns have a fixed shape.
def unmerge_heads(model: Model) -> PassResult:
    changes = 0
    for graph, split in live_ops(model, "Reshape"):
        lead = _split_lead(split)
        if lead is None:
            continue
        plan = _plan(split.inputs[0], lead)
        source = _merge_source(plan) if plan is not None else None
        if source is None or plan[0] != "op":
            continue
        new = _build(graph, split, plan, lead, source)
        if not replace_value(graph, split.output, new):
            continue
        remove_if_dead(graph, split)
        changes += 1
    return PassResult(changes)


def _split_lead(split: Node):
    """``(d0, d1)`` when ``split`` turns ``[d0*d1, x, y]`` into ``[d0, d1, x, y]``."""
    x, out = split.inputs[0].shape, split.output.shape
    if x is None or out is None or len(x) != 3 or len(out) != 4:
        return None
    if not (sd.same(x[1], out[2]) and sd.same(x[2], out[3])):
        return None
    return (out[0], out[1]) if sd.same(x[0], sd.mul(out[0], out[1])) else None


def _is_merge(node: Node | None, lead) -> bool:
    if not is_op(node, "Reshape"):
        return False
    x, out = node.inputs[0].shape, node.output.shape
    return (x is not None and out is not None and len(x) == 4 and len(out) == 3
            and sd.same(x[0], lead[0]) and sd.same(x[1], lead[1])
            and sd.same(x[2], out[1]) and sd.same(x[3], out[2]))


def _plan(v: Value, lead):
    """How to produce ``v`` in 4-D: ("merge", v4) | ("keep", v) | ("split", v) |
    ("op", node, [plans], shape readers), or None."""
    shape = v.shape
    if shape is None:
        return None
    node = v.producer
    if _is_merge(node, lead):
        return ("merge", node.inputs[0])
    if len(shape) <= 2 or (len(shape) == 3 and shape[0] == 1):
        return ("keep", v)
    if len(shape) != 3:
        return None
    readers = [n for n, _ in v.uses()]
    # TorchScript exports read shapes of these views (batch = shape[0] // heads): such readers
    # get the same numbers from the 4-D result; any other second reader keeps the 3-D value.
    shape_readers = [n for n in readers if is_op(n, "Shape") and not n.attrs]
    private = not v.is_graph_output and len(readers) - len(shape_readers) == 1
    if private and node is not None and node.domain in STANDARD_DOMAINS and (
            node.op_type in ELEMENTWISE or (node.op_type == "MatMul" and len(node.inputs) == 2)):
        children = [_plan(i, lead) for i in node.inputs]
        if all(c is not None for c in children):
            return ("op", node, children, shape_readers)
    return ("split", v) if sd.same(shape[0], sd.mul(*lead)) else None


def _merge_source(plan) -> Value | None:
    """A 4-D operand whose two leading axes are the split's (to read their sizes from)."""
    if plan[0] == "merge":
        return plan[1]
    if plan[0] == "op":
        for child in plan[2]:
            found = _merge_source(child)
            if found is not None:
                return found
    return None


def _build(graph: Graph, anchor: Node, plan, lead, source: Value) -> Value:
    """The 4-D value for ``plan``; new nodes go before the node they replace (``anchor`` for
    a leaf), so that readers of the old values' shapes can be served in place."""
    kind = plan[0]
    if kind in ("merge", "keep"):
        return plan[1]
    if kind == "split":
        return _split(graph, anchor, plan[1], lead, source)
    _, node, children, shape_readers = plan
    inputs = [_build(graph, node, child, lead, source) for child in children]
    build = NodeBuilder(graph, node, CREATED_BY, by_op=True)
    new = build.node(node.op_type, inputs, attrs=dict(node.attrs), dtype=node.output.dtype,
                     shape=(*lead, *node.output.shape[1:]))
    new.sem.update(node.sem)  # MatMul transpose flags live there
    for reader in shape_readers:
        replace_value(graph, reader.output, _merged_shape(graph, node, new.output))
    return new.output


def _merged_shape(graph: Graph, anchor: Node, v4: Value) -> Value:
    """The shape of ``v4`` ``[d0, d1, x, y]`` as its 3-D view has it: ``[d0*d1, x, y]``."""
    shape = _int_op(graph, anchor, "Shape", [v4])
    merged = _int_op(graph, anchor, "Mul", [_slice(graph, anchor, shape, 0, 1),
                                            _slice(graph, anchor, shape, 1, 2)])
    return _int_op(graph, anchor, "Concat", [merged, _slice(graph, anchor, shape, 2, 4)], axis=0)


def _int_op(graph: Graph, anchor: Node, op_type: str, inputs, **attrs) -> Value:
    build = NodeBuilder(graph, anchor, CREATED_BY, by_op=True)
    return build.node(op_type, inputs, attrs={k: int_attr(a) for k, a in attrs.items()},
                      dtype="int64").output


def _ints(graph: Graph, values) -> Value:
    return graph.add_constant(LazyTensor.from_array(np.array(values, np.int64)),
                              hint=f"{CREATED_BY}/const")


def _slice(graph: Graph, anchor: Node, v: Value, start: int, end: int) -> Value:
    return _int_op(graph, anchor, "Slice", [v, _ints(graph, [start]), _ints(graph, [end])])


def _split(graph: Graph, anchor: Node, v: Value, lead, source: Value) -> Value:
    """``v`` ``[d0*d1, x, y]`` reshaped to ``[d0, d1, x, y]``, sizes read at run time."""
    leading = _slice(graph, anchor, _int_op(graph, anchor, "Shape", [source]), 0, 2)
    rest = v.shape[1:]
    if sum(not isinstance(d, int) for d in rest) <= 1:
        # Sizes that are numbers, -1 for at most one symbol: no Shape reader on ``v`` (which
        # would keep e.g. a 3-D transpose of K from folding into the 4-D one).
        trailing = _ints(graph, [d if isinstance(d, int) else -1 for d in rest])
    else:
        trailing = _slice(graph, anchor, _int_op(graph, anchor, "Shape", [v]), 1, 3)
    target = _int_op(graph, anchor, "Concat", [leading, trailing], axis=0)
    build = NodeBuilder(graph, anchor, CREATED_BY, by_op=True)
    return build.node("Reshape", [v, target], dtype=v.dtype, shape=(*lead, *v.shape[1:])).output
