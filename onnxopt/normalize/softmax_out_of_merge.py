"""A Softmax over the last axis of a merged-heads view runs on the 4-D values instead, and the
view moves after it, so the readers that split it back read the 4-D probabilities.

    Softmax(Reshape(s4, merge), -1)  ->  Reshape(Softmax(s4, -1), merge)
    Reshape(that, split)             ->  Softmax(s4, -1)            (split: back to s4's shape)

Models that compute the probabilities on ``[B·H, S, S]`` views (VITS, anything written with
``bmm``) add their mask on the 4-D scores and merge them only for the Softmax, because a
term they compute from the probabilities works on the merged view; P·V then splits them back
to 4-D. ``unmerge_heads`` cannot hoist the split over the Softmax: the merged probabilities
have that other reader. Softmax normalises each row of its last axis on its own, and a merge
of the two leading axes moves no element and keeps every row whole, so the softmax of the
merged view is the merge of the softmax, bit for bit. The other readers keep the merged view
(the same Reshape, now after the Softmax).

Done only where some reader splits the merged probabilities back to the 4-D shape: elsewhere
it would change nothing that a later stage reads.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.normalize._common import is_op, live_ops
from onnxopt.rewrite.driver import PassResult

CREATED_BY = "softmax_out_of_merge"


def softmax_out_of_merge(model: Model) -> PassResult:
    changes = 0
    for graph, softmax in live_ops(model, "Softmax"):
        merge = softmax.inputs[0].producer
        if not _last_axis(softmax) or not _merges_leading_axes(merge):
            continue
        scores = merge.inputs[0]
        probs = softmax.output
        splits = [n for n, i in probs.uses() if i == 0 and _splits_back(n, scores.shape)]
        if not splits or probs.is_graph_output:
            continue
        build = NodeBuilder(graph, softmax, CREATED_BY, by_op=True)
        new = build.node("Softmax", [scores], attrs={"axis": -1}, dtype=probs.dtype,
                         shape=scores.shape)
        if "stable" in softmax.sem:
            new.sem["stable"] = softmax.sem["stable"]
        merged = build.node("Reshape", [new.output, merge.inputs[1]], attrs=dict(merge.attrs),
                            dtype=probs.dtype, shape=probs.shape)
        for split in splits:
            replace_value(graph, split.output, new.output)
        replace_value(graph, probs, merged.output)
        remove_if_dead(graph, *splits, merged, softmax, merge)
        changes += 1
    return PassResult(changes)


def _last_axis(softmax: Node) -> bool:
    # (the importer's reduction axes: they account for every opset's meaning of ``axis``)
    axes = softmax.sem.get("axes")
    return (softmax.inputs[0].rank == 3 and axes not in (None, "dynamic")
            and tuple(axes) == (2,) and is_op(softmax, "Softmax"))


def _merges_leading_axes(merge: Node | None) -> bool:
    """``merge`` reshapes ``[d0, d1, x, y]`` into ``[d0·d1, x, y]``."""
    if not is_op(merge, "Reshape") or len(merge.inputs) != 2 or merge.inputs[1] is None:
        return False  # (opsets before 5: the target is an attribute)
    x, out = merge.inputs[0].shape, merge.output.shape
    return (x is not None and out is not None and len(x) == 4 and len(out) == 3
            and sd.same(out[0], sd.mul(x[0], x[1])) and sd.same(x[2], out[1])
            and sd.same(x[3], out[2]))


def _splits_back(node: Node, shape) -> bool:
    """``node`` reshapes the merged view back to ``shape`` (every dim provably the same)."""
    out = node.output.shape if is_op(node, "Reshape") else None
    return (out is not None and shape is not None and len(out) == len(shape)
            and all(sd.same(a, b) for a, b in zip(out, shape)))
