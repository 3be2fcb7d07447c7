"""Which inferred shapes the exporter writes for standard ops: those of ops whose output
shape ONNX Runtime reads from an input's *values*.

ORT infers shapes from shapes. ``Range(0, Gather(Shape(x), 1), 1)`` — a position index —
comes out of its inference as ``[?]``, and the unnamed dim spreads: added to the
embeddings it turns ``[batch, seq, 256]`` into ``[batch, ?, 256]``, and every value after
it, to the logits, has a dim ORT's allocation planner cannot compare with any other.
Planning that graph took ORT twice as long (a 24-layer GPT-2: 0.38 s against 0.20 s to
create the session) for the same plan at run time. onnxopt's inference follows the values
(``Shape → Gather → Range`` is ``seq``), so at these few ops it writes what it knows, and
ORT's own inference names everything downstream from there.

Only fully named shapes are written: every dim a number or a symbol of the input's own
(never one inference made up, ``?N``, which means "unknown" to every other value).
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.node import STANDARD_DOMAINS, Node
from onnxopt.ir.value import Value

# Standard ops whose output shape depends on the values of an input (a shape, sizes, axes,
# bounds, counts), not on input shapes alone; and If, whose branches ORT's inference merges
# dim by dim (a dim each branch computes its own way comes out unnamed).
SHAPE_FROM_VALUES = frozenset({
    "CenterCropPad", "Col2Im", "ConstantOfShape", "DFT", "Expand", "If", "MaxUnpool", "OneHot",
    "Pad", "Range", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
    "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Reshape",
    "Resize", "STFT", "Slice", "Split", "Squeeze", "Tile", "TopK", "Unsqueeze", "Upsample",
})


def names_what_ort_cannot(node: Node, out: Value) -> bool:
    """Whether ``out``'s inferred shape is written: a standard op that reads its output shape
    from values, and a shape with every dim named."""
    domain, op_type = node.onnx_op
    if domain not in STANDARD_DOMAINS or op_type not in SHAPE_FROM_VALUES:
        return False
    if out.dtype is None or out.shape is None or out.type_proto is not None:
        return False
    return all(isinstance(d, int) or (isinstance(d, str) and d and not sd.is_fresh(d))
               for d in out.shape)
