"""The shape of a transposed value is read from the value before the transpose.

    Shape(Transpose(v, perm), start, end)  ->  Gather(Shape(v), perm[start:end])

Why: TorchScript exports read sizes off whatever tensor is at hand, often a Transpose
(BLOOM reads the key length off its transposed keys to slice the mask). A Transpose read
by a Shape is kept computed for that reader alone, and it stands between the layout
passes and the attention pattern (``transpose_through_reshape`` needs the transposed
view private). Read from ``v``, the sizes are the same numbers and the Transpose has one
reader less. ``Shape(v)`` is shared with any other Shape of ``v`` by CSE.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir.edit import replace_value
from onnxopt.ir.model import Model
from onnxopt.ir.tensor import LazyTensor
from onnxopt.normalize._common import is_op, live_ops, new_node, remove_chain

NAME = "shape_of_transpose"


def shape_of_transpose(model: Model) -> int:
    changes = 0
    for graph, shape in live_ops(model, "Shape"):
        t = shape.inputs[0].producer
        if not is_op(t, "Transpose") or t.inputs[0] is None:
            continue
        v = t.inputs[0]
        perm = t.attr("perm", t.sem.get("perm"))
        if perm is None or v.rank is None or len(perm) != v.rank:
            continue
        picked = _sliced(list(perm), shape.attr("start", 0), shape.attr("end"))
        of_v = new_node(graph, "Shape", [v], before=shape, created_by=NAME, dtype="int64",
                        shape=(v.rank,))
        index = graph.add_constant(LazyTensor.from_array(np.array(picked, np.int64)),
                                   hint=f"{NAME}/perm")
        gathered = new_node(graph, "Gather", [of_v.output, index], before=shape,
                            created_by=NAME, attrs=None, dtype="int64", shape=(len(picked),))
        if not replace_value(graph, shape.output, gathered.output):
            graph.remove([gathered, of_v])
            continue
        remove_chain(graph, [shape, t])
        changes += 1
    return changes


def _sliced(perm: list[int], start: int, end: int | None) -> list[int]:
    """``perm[start:end]`` with Shape's clamping of negative and out-of-range bounds."""
    rank = len(perm)
    lo = max(0, min(rank, start + rank if start < 0 else start))
    hi = rank if end is None else max(0, min(rank, end + rank if end < 0 else end))
    return perm[lo:hi]
