"""Values whose rank the computation does not fix, so no declared shape of theirs is believed.

A few ops take their output's rank from the *length* of a 1-D input: Reshape and Expand from
their shape, ConstantOfShape from its input, Unsqueeze and Squeeze from their axes, and a
reduction that drops its axes from those. When that length is not a number known before the
model runs (``Unsqueeze([0], axes=Range(0, seq))``), the output has rank ``seq + 1`` in one
run and another rank in the next, and a shape the file declares for it is true for one
length at most. onnx's inference then leaves the output without a rank; the importer would
otherwise fill it from the file's ``value_info``, and a fusion matched on that rank computes
something else (fuzz run 43: an attention fused at rank 4 on a value of rank ``seq + 2``).

Everything computed from such a value inherits the doubt, unless onnx's inference, which
starts from the graph's inputs and never from declared intermediate types, gave it a shape.
"""

from __future__ import annotations

from onnx import GraphProto

from onnxopt.ir.node import STANDARD_DOMAINS
from onnxopt.ir.value import Shape

# op → the input whose length is (or moves) the output's rank.
_RANK_FROM_LENGTH = {"Reshape": 1, "Expand": 1, "ConstantOfShape": 0, "Unsqueeze": 1,
                     "Squeeze": 1}
_REDUCTIONS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
               "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}


def ranks_that_vary(g: GraphProto, inferred: dict[str, tuple[str | None, Shape]]) -> set[str]:
    """The names in ``g`` (not its subgraphs) whose rank may differ from one run to the next,
    by ``inferred`` (onnx's inference: dtype and shape by name)."""
    inferred = {name: known for name, known in inferred.items()}
    for o in g.output:  # what inference hands back for these is the file's own declaration
        inferred.pop(o.name, None)
    constant = {t.name for t in g.initializer}
    constant.update(n.output[0] for n in g.node
                    if n.op_type == "Constant" and n.domain in STANDARD_DOMAINS and n.output)
    varying: set[str] = set()
    for node in g.node:
        if varying and any(name in varying for name in node.input):
            varying.update(o for o in node.output if o and _rank_of(inferred, o) is None)
            continue
        i = _length_input(node)
        if i is None or i >= len(node.input) or not node.input[i] or node.input[i] in constant:
            continue
        if not node.output or not node.output[0] or _rank_of(inferred, node.output[0]) is not None:
            continue
        length = inferred.get(node.input[i], (None, None))[1]
        if length is None or len(length) != 1 or not isinstance(length[0], int):
            varying.add(node.output[0])
    return varying


def _length_input(node) -> int | None:
    if node.domain not in STANDARD_DOMAINS:
        return None
    if node.op_type in _RANK_FROM_LENGTH:
        return _RANK_FROM_LENGTH[node.op_type]
    if node.op_type in _REDUCTIONS and _keepdims(node) == 0:
        return 1
    return None


def _keepdims(node) -> int:
    for a in node.attribute:
        if a.name == "keepdims":
            return a.i
    return 1


def _rank_of(inferred: dict[str, tuple[str | None, Shape]], name: str) -> int | None:
    shape = inferred.get(name, (None, None))[1]
    return None if shape is None else len(shape)
