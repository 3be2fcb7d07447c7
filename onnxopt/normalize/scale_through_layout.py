"""A scalar scale moves past the layout ops after it, toward the MatMul that consumes it.

OPT-style attention scales Q right after its projection, before the head split:

    Transpose(Reshape(Mul(x·Wq, 0.125)))   ->   Mul(Transpose(Reshape(x·Wq)), 0.125)

Multiplying by one number commutes with every op that only moves elements
(Reshape, Transpose, Squeeze, Unsqueeze, Flatten), so the two spellings are
the same function, bit for bit. Moved next to the Q·Kᵀ MatMul, the scale is
where ``canonical_scale`` puts every attention scale (one Mul after the
scores), and the projection is a plain MatMul that attention can absorb.

Only a float scalar constant whose broadcast cannot change the shape moves,
only when the Mul's result feeds that layout op alone, and the moved Mul reads
a 0-d constant so the layout op's output shape is kept.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.model import Model
from onnxopt.ir.tensor import LazyTensor
from onnxopt.normalize._common import (
    is_op,
    is_private,
    live_ops,
    scalar_operand,
)
from onnxopt.rewrite.driver import PassResult

NAME = "scale_through_layout"
LAYOUT_OPS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten")


# A hand walk, not a pattern (onnxopt.rewrite.pattern): a scale moved through a chain of layout
# ops of any length: patterns have a fixed depth.
def scale_through_layout(model: Model) -> PassResult:
    changes = 0
    for graph, mul in live_ops(model, "Mul"):
        found = scalar_operand(mul)
        if found is None:
            continue
        k, value = found
        x, c = mul.inputs[1 - k], mul.inputs[k]
        uses = mul.output.uses()
        if len(uses) != 1 or not is_private(mul.output, uses[0][0]):
            continue
        layout, index = uses[0]
        if not is_op(layout, *LAYOUT_OPS) or index != 0:
            continue
        if x.rank is None or len(c.const.shape) > x.rank or x.dtype != c.dtype or x.dtype is None:
            continue
        if layout.output in graph.output_set():
            continue
        graph.set_input(layout, 0, x)
        scalar = graph.add_constant(
            LazyTensor.from_array(np.array(value, numpy_dtype(x.dtype))), hint=f"{NAME}/scale")
        moved = NodeBuilder(graph, layout, NAME, by_op=True).node("Mul", [layout.output, scalar],
                                                                  dtype=layout.output.dtype,
                                                                  shape=layout.output.shape)
        graph.move_before(moved, layout)  # the layout op first, then the Mul reading it
        for reader, i in layout.output.uses():
            if reader is not moved:
                graph.set_input(reader, i, moved.output)
        graph.remove(mul)
        changes += 1
    return PassResult(changes)

