"""softmax_out_of_merge: a Softmax on a merged-heads view runs on the 4-D scores; readers that
split the probabilities back read them directly, the others keep the merged view."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnxruntime as ort

from onnxopt import normalize
from onnxopt.exporter import export_model
from onnxopt.importer import import_model
from onnxopt.options import OptimizeOptions

# Scores [B, 2, S, S] merged to [2B, S, S] for the Softmax; P·V splits them back; a second
# reader ({other}) keeps the merged view.
MERGED_SOFTMAX = """
g (float[B, 2, S, S] s4, float[B, 2, S, 8] v) => (float[B, 2, S, 8] o, float[{out}] w)
  <int64[1] zero = {{0}}, int64[1] one = {{1}}, int64[1] two = {{2}}, int64[1] three = {{3}},
   int64[1] four = {{4}}, int64[1] neg = {{-1}}> {{
    shape4 = Shape (s4)
    {merge}
    s3 = Reshape (s4, merge)
    p3 = Softmax <axis = -1> (s3)
    p4 = Reshape (p3, shape4)
    o = MatMul (p4, v)
    {other}
}}
"""
HEADS_MERGE = "tail = Slice (shape4, two, four)\n    merge = Concat <axis = 0> (neg, tail)"
# [B, 2, S, S] -> [B, 2·S, S]: the heads merged with the queries, not with the batch
QUERIES_MERGE = ("b = Slice (shape4, zero, one)\n    s = Slice (shape4, three, four)\n"
                 "    merge = Concat <axis = 0> (b, neg, s)")
OTHER = "w = Relu (p3)"


def _normalize(model) -> dict[str, int]:
    return normalize.run(model, OptimizeOptions(target="cpu"))


def _run(proto, feeds):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _feeds(rng, b=2, s=5):
    return {"s4": rng.standard_normal((b, 2, s, s)).astype(np.float32) * 4,
            "v": rng.standard_normal((b, 2, s, 8)).astype(np.float32)}


def test_the_split_reader_reads_the_four_dimensional_softmax_bit_for_bit(make_model):
    proto = make_model(MERGED_SOFTMAX.format(merge=HEADS_MERGE, other=OTHER, out="?, S, S"))
    model = import_model(proto)
    assert _normalize(model).get("softmax_out_of_merge") == 1
    (softmax,) = [n for n in model.graph if n.op_type == "Softmax"]
    assert softmax.inputs[0].name == "s4" and softmax.inputs[0].rank == 4
    matmul = next(n for n in model.graph if n.op_type == "MatMul")
    assert matmul.inputs[0] is softmax.output  # the split of the merge is gone
    relu = next(n for n in model.graph if n.op_type == "Relu")
    assert relu.inputs[0].producer.op_type == "Reshape"  # the other reader: the merged view
    rng = np.random.default_rng(0)
    for b, s in ((2, 5), (1, 9)):
        feeds = _feeds(rng, b, s)
        for want, got in zip(_run(proto, feeds), _run(export_model(model), feeds)):
            assert np.array_equal(want, got)


def test_nothing_splits_the_probabilities_back_nothing_changes(make_model):
    text = MERGED_SOFTMAX.format(merge=HEADS_MERGE, other=OTHER, out="?, S, S").replace(
        "o = MatMul (p4, v)", "o = MatMul (s4, v)")
    model = import_model(make_model(text))
    assert "softmax_out_of_merge" not in _normalize(model)


def test_a_reshape_that_does_not_merge_the_leading_axes_stays(make_model):
    """The rows are the same, but the merged axis is heads·queries, not batch·heads: not the
    view this normal form is about."""
    text = MERGED_SOFTMAX.format(merge=QUERIES_MERGE, other=OTHER, out="B, ?, S")
    model = import_model(make_model(text))
    assert "softmax_out_of_merge" not in _normalize(model)
    assert Counter(n.op_type for n in model.graph)["Softmax"] == 1
