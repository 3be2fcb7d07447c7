"""A recurrent decoder's dot attention, softmax(K·h)·V with K·h written as a bmm of the keys
and h as a column: one query, one head, fused; look-alikes refused with their reasons."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline

LUONG = """
g (float[batch, 32] h, float[batch, src, 32] enc, float[batch, src] m) => ({out}) {{
    a2 = Constant <value = int64[1] {{{column_axis}}}> ()
    a1 = Constant <value = int64[1] {{1}}> ()
    hc = Unsqueeze (h, a2)
    sc = MatMul (enc, hc)
    s = Squeeze (sc, a2)
    c = Constant <value = float {{0.5}}> ()
    ss = Mul (s, c)
    {mask}
    p = Softmax <axis = 1> (a)
    pr = Unsqueeze (p, a1)
    o = MatMul (pr, enc)
}}
"""
PLAIN_MASK = "a = Add (ss, m)"
# a "mask" computed from V (here the encoder outputs, which are also the keys' values)
V_MASK = "r = ReduceSum <keepdims = 0> (enc, a2)\n    mr = Add (r, m)\n    a = Add (ss, mr)"
# a padding mask from a predicate on V: the source positions whose encoder output sums to 0
V_PADDING = ("r = ReduceSum <keepdims = 0> (enc, a2)\n    z = Constant <value = float {0}> ()\n"
             "    pad = Equal (r, z)\n    big = Constant <value = float {-10000}> ()\n"
             "    mp = Where (pad, big, z)\n    mr = Add (mp, m)\n    a = Add (ss, mr)")


def _model(make_model, mask=PLAIN_MASK, column_axis=2, out="float[batch, 1, 32] o"):
    return make_model(LUONG.format(mask=mask, column_axis=column_axis, out=out))


def _regions(proto):
    result = run_pipeline(proto, OptimizeOptions(target="cpu", debug=True))
    return result, [r for r in result.report.stages["fuse"].regions if r.family == "attention"]


def test_one_query_dot_attention_fuses_and_computes_the_same(make_model):
    proto = _model(make_model)
    result, regions = _regions(proto)
    assert [(r.rule, r.status) for r in regions] == [("single_query_attention", "fused")]
    assert regions[0].detail == "one query vector, 1 head, scale 0.5, mask additive"
    original = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    fused = ort.InferenceSession(result.proto.SerializeToString(),
                                 providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, src in ((2, 7), (3, 16)):
        mask = np.zeros((batch, src), np.float32)
        mask[1:, src - 3:] = -1e4  # padded source positions
        feeds = {"h": rng.standard_normal((batch, 32), np.float32),
                 "enc": rng.standard_normal((batch, src, 32), np.float32), "m": mask}
        want, got = original.run(None, feeds)[0], fused.run(None, feeds)[0]
        assert float(np.abs(got - want).max()) < 1e-5


def test_the_last_axis_written_as_minus_one_is_the_column_too(make_model):
    _, regions = _regions(_model(make_model, column_axis=-1))
    assert [(r.rule, r.status) for r in regions] == [("single_query_attention", "fused")]


def test_a_softmax_over_the_batch_is_refused(make_model):
    proto = make_model(LUONG.format(mask=PLAIN_MASK, column_axis=2, out="float[batch, 1, 32] o")
                       .replace("Softmax <axis = 1>", "Softmax <axis = 0>"))
    _, regions = _regions(proto)
    assert [(r.status, r.code) for r in regions] == [("refused", "softmax_not_last_axis")]


def test_a_mask_that_reads_v_is_refused(make_model):
    _, regions = _regions(_model(make_model, mask=V_MASK))
    assert [(r.status, r.code) for r in regions] == [("refused", "score_term_reads_v")]
    assert regions[0].detail == "%mr: a term added to the scores reads V (%enc): not a score bias"


def test_a_padding_mask_from_a_predicate_on_v_fuses(make_model):
    _, regions = _regions(_model(make_model, mask=V_PADDING))
    assert [(r.rule, r.status) for r in regions] == [("single_query_attention", "fused")]
