"""Attention over a key/value cache: K and V are the past concatenated with the new keys, the
mask covers ``total = past + seq`` keys (an input the graph never ties to the others)."""

from __future__ import annotations

from onnxopt import normalize
from onnxopt.importer import import_model
from onnxopt.ir import symdim as sd
from onnxopt.legality.target import run_target
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import fuse_and_settle, run_pipeline
from onnxopt.verification import verify_models

CACHED = """
g (float[B,4,S,8] q, float[B,4,S,8] k_new, float[B,4,S,8] v_new, float[B,4,P,8] past_k,
   float[B,4,P,8] past_v, int64[B,T] attention_mask) => (float[B,4,S,8] o)
  <int64[1] one = {1}, int64[1] two = {2}, int64[1] three = {3}, int64 step = {1},
   int64 zero = {0}, int64[1] axis0 = {0}, int64[2] axes01 = {1, 2}, float scale = {0.35},
   float masked = {-3.4028234663852886e+38}, float visible = {0.0}> {
    k = Concat <axis = 2> (past_k, k_new)
    v = Concat <axis = 2> (past_v, v_new)
    mshape = Shape (attention_mask)
    t1 = Slice (mshape, one, two)
    t = Squeeze (t1, axis0)
    qshape = Shape (q)
    s1 = Slice (qshape, two, three)
    s = Squeeze (s1, axis0)
    start = Sub (t, s)
    rows = Range (start, t, step)
    cols = Range (zero, t, step)
    r2 = Unsqueeze (rows, one)
    c2 = Unsqueeze (cols, axis0)
    future = Greater (c2, r2)
    pad = Equal (attention_mask, zero)
    pad4 = Unsqueeze (pad, axes01)
    hidden = Or (future, pad4)
    mask = Where (hidden, masked, visible)
    kt = Transpose <perm = [0, 1, 3, 2]> (k)
    scores = MatMul (q, kt)
    scaled = Mul (scores, scale)
    biased = Add (scaled, mask)
    probs = Softmax <axis = -1> (biased)
    o = MatMul (probs, v)
}"""


def test_sum_symbols():
    assert sd.add("past", "seq") == "(past+seq)" == sd.add("seq", "past")
    assert sd.same(sd.add(sd.add("past", "seq"), 1), sd.add("past", sd.add(1, "seq")))
    assert sd.sub("(past+seq)", "seq") == "past"
    assert sd.evaluate("(past+seq)", {"past": 7, "seq": 4}) == 11
    assert sd.evaluate("4*batch", {"batch": 2}) == 8
    assert sd.add("4*batch", "seq") == "(4*batch+seq)"  # products inside sums (issue 33)
    assert sd.sub(sd.mul(2, "seq"), 1) == "(2*seq-1)" == sd.add(sd.add(9, "seq"), "(seq-10)")
    assert sd.evaluate("(2*seq-1)", {"seq": 5}) == 9 and sd.evaluate("2*(seq-1)", {"seq": 5}) == 8
    assert sd.div(sd.mul(16, "(seq-1)"), "(seq-1)") == 16  # a sum in a product is a factor
    assert sd.add(sd.mul("seq", "(seq-1)"), 1) is None  # a sum inside a product, in a sum
    # OPT slices its positions after the cache: total - past, and past + (total - past) = total
    assert sd.sub("total", "past") == "(total-past)"
    assert sd.add("past", sd.sub("total", "past")) == "total"
    assert sd.evaluate("(total-past)", {"total": 11, "past": 7}) == 4
    assert sd.add("x", "x") == "2*x" and sd.sub("x", "x") == 0


def test_cached_attention_fuses_with_its_mask_classified(make_model):
    proto = make_model(CACHED)
    model = import_model(proto)
    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    k = next(n for n in model.graph if n.op_type == "Concat" and n.output.shape[1] == 4)
    assert k.output.shape[2] == "(P+S)"
    report = fuse_and_settle(model, options, run_target(options, model.opset))
    assert report.count("attention") == 1, report.summary()
    (node,) = [n for n in model.graph if n.op_type == "AttentionFused"]
    assert node.attr("mask_kind") == "causal+key_padding"  # probed at T = P + S


def test_cached_attention_verifies_on_consistent_sizes(make_model):
    proto = make_model(CACHED)
    result = run_pipeline(proto, OptimizeOptions(target="cpu"))
    report = verify_models(proto, result.proto)
    assert report.ok, report.to_json()
    for run in report.runs:  # one shared size would not run: T must be P + S
        assert run["attention_mask"][1] == run["past_k"][2] + run["q"][2]
