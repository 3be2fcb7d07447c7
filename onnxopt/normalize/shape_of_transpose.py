"""The shape of a transposed value is read from the value before the transpose.

    Shape(Transpose(v, perm), start, end)  ->  Gather(Shape(v), perm[start:end])

Why: TorchScript exports read sizes off whatever tensor is at hand, often a Transpose
(BLOOM reads the key length off its transposed keys to slice the mask), and such a reader
keeps ``transpose_through_reshape`` from folding the transpose into one 4-D transpose of the
keys. Read from ``v``, the sizes are the same numbers and the Transpose has one reader
less. It is done only where that lets the fold happen: elsewhere a Gather would be added
next to a Transpose that stays computed for its other readers.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Node
from onnxopt.ir.tensor import LazyTensor
from onnxopt.normalize._common import is_op

NAME = "shape_of_transpose"


def read_before_transpose(graph: Graph, shape: Node) -> bool:
    """Rewrite ``shape = Shape(Transpose(v, perm))`` to read ``v``; whether it did."""
    t = shape.inputs[0].producer
    if not is_op(t, "Transpose") or t.inputs[0] is None:
        return False
    v = t.inputs[0]
    perm = t.attr("perm", t.sem.get("perm"))
    if perm is None or v.rank is None or len(perm) != v.rank:
        return False
    picked = _sliced(list(perm), shape.attr("start", 0), shape.attr("end"))
    build = NodeBuilder(graph, shape, NAME, by_op=True)
    of_v = build.node("Shape", [v], dtype="int64", shape=(v.rank,))
    index = graph.add_constant(LazyTensor.from_array(np.array(picked, np.int64)),
                               hint=f"{NAME}/perm")
    gathered = build.node("Gather", [of_v.output, index], dtype="int64", shape=(len(picked),))
    gathered.output.sym = shape.output.sym
    if not replace_value(graph, shape.output, gathered.output):
        graph.remove([gathered, of_v])
        return False
    remove_if_dead(graph, shape, t)
    return True


def _sliced(perm: list[int], start: int, end: int | None) -> list[int]:
    """``perm[start:end]`` with Shape's clamping of negative and out-of-range bounds."""
    rank = len(perm)
    lo = max(0, min(rank, start + rank if start < 0 else start))
    hi = rank if end is None else max(0, min(rank, end + rank if end < 0 else end))
    return perm[lo:hi]
