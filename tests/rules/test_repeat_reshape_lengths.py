"""Grouped-query heads repeated by a Reshape whose key length is named after another input:
the Reshape keeps its element count, so with batch, heads and head size proven the key length
is K's own. A merged decoder's no-cache branch (dynamo) reshapes K to
[batch, 4, total_sequence, 16] from K's [batch, 2, sequence, 16]: equal there (no past)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline

# K and V repeated over heads; the repeat's Reshape target takes its key length from the
# attention mask's shape, as a merged decoder's branch does (there the mask covers past + seq).
REPEAT = """
g (float[batch, 4, seq, 16] q, float[batch, 2, seq, 16] k, float[batch, 2, seq, 16] v,
   int64[batch, total] am) => (float[batch, 4, seq, 16] o) {{
    ax = Constant <value = int64[1] {{2}}> ()
    z = Constant <value = int64[1] {{0}}> ()
    one = Constant <value = int64[1] {{1}}> ()
    two = Constant <value = int64[1] {{2}}> ()
    four = Constant <value = int64[1] {{4}}> ()
    hd = Constant <value = int64[1] {{{head}}}> ()
    sk = Shape (k)
    bk = Slice (sk, z, one)
    hk = Slice (sk, one, two)
    tail = Shape <start = 2> (k)
    es = Concat <axis = 0> (bk, hk, two, tail)
    sm = Shape (am)
    bm = Slice (sm, z, one)
    tot = Slice (sm, one, two)
    rs = Concat <axis = 0> (bm, four, tot, hd)
    ku = Unsqueeze (k, ax)
    ke = Expand (ku, es)
    kr = Reshape (ke, rs)
    vu = Unsqueeze (v, ax)
    ve = Expand (vu, es)
    vr = Reshape (ve, rs)
    kt = Transpose <perm = [0, 1, 3, 2]> (kr)
    s = MatMul (q, kt)
    c = Constant <value = float {{0.25}}> ()
    ss = Mul (s, c)
    amf = Cast <to = 1> (am)
    one_f = Constant <value = float {{1}}> ()
    inv = Sub (one_f, amf)
    big = Constant <value = float {{-10000}}> ()
    add = Mul (inv, big)
    ax12 = Constant <value = int64[2] {{1, 2}}> ()
    m = Unsqueeze (add, ax12)
    a = Add (ss, m)
    p = Softmax <axis = -1> (a)
    o = MatMul (p, vr)
}}
"""


def _attention_regions(proto):
    result = run_pipeline(proto, OptimizeOptions(target="cpu", debug=True))
    return result, [r for r in result.report.stages["fuse"].regions if r.rule == "attention"]


def test_the_key_length_a_reshape_keeps_is_proven(make_model):
    proto = make_model(REPEAT.format(head=16))
    result, regions = _attention_regions(proto)
    assert [r.status for r in regions] == ["fused"], [r.detail for r in regions]
    assert "kv heads 2" in regions[0].detail
    original = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    fused = ort.InferenceSession(result.proto.SerializeToString(),
                                 providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, seq in ((2, 5), (3, 9)):
        am = np.ones((batch, seq), np.int64)
        am[1:, seq - 2:] = 0
        feeds = {"q": rng.standard_normal((batch, 4, seq, 16), np.float32),
                 "k": rng.standard_normal((batch, 2, seq, 16), np.float32),
                 "v": rng.standard_normal((batch, 2, seq, 16), np.float32), "am": am}
        want, got = original.run(None, feeds)[0], fused.run(None, feeds)[0]
        assert float(np.abs(got - want).max()) < 1e-5


def test_a_reshape_that_changes_the_head_size_is_still_refused(make_model):
    """[batch, 4, total, 8] from [batch, 2, 2, seq, 16]: the head size differs, so nothing
    forces the key length; the repeat is not over heads."""
    proto = make_model(REPEAT.format(head=8).replace("float[batch, 4, seq, 16] q",
                                                     "float[batch, 4, seq, 8] q"))
    _, regions = _attention_regions(proto)
    assert [(r.status, r.code) for r in regions] == [("refused", "repeat_reshape_shape")]
