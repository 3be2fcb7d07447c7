"""unmerge_heads: attention computed on [B*H, S, D] views (BLOOM) becomes 4-D again."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from onnxopt import normalize
from onnxopt.importer import import_model
from onnxopt.legality.target import run_target
from onnxopt.normalize.unmerge_heads import unmerge_heads
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import fuse_and_settle, run_pipeline

# BLOOM's attention in miniature: Q/K/V [B,4,S,8] merged to [4B,S,8]; scores with a bmm, a
# scale and a [4B,1,S] bias on the 3-D view; split for the mask and Softmax; merged again for
# P·V; split once more. The Shape of the P·V view is read (batch = shape[0] / heads).
BLOOM_LIKE = """
g (float[B,4,S,8] q, float[B,4,S,8] k, float[B,4,S,8] v, float[B,4,1,S] bias4,
   float[B,1,S,S] m) => (float[B,4,S,8] o, int64[3] pv_shape)
  <int64[1] zero = {0}, int64[1] one = {1}, int64[1] two = {2}, int64[1] three = {3},
   int64[1] heads = {4}, int64[1] eight = {8}, float c = {0.35}> {
    shape4 = Shape (m)
    b = Slice (shape4, zero, one)
    s = Slice (shape4, two, three)
    bh = Mul (b, heads)
    merge = Concat <axis = 0> (bh, s, eight)
    q3 = Reshape (q, merge)
    k3 = Reshape (k, merge)
    v3 = Reshape (v, merge)
    bias_merge = Concat <axis = 0> (bh, one, s)
    bias3 = Reshape (bias4, bias_merge)
    kt = Transpose <perm = [0, 2, 1]> (k3)
    s3 = MatMul (q3, kt)
    scaled = Mul (s3, c)
    biased = Add (scaled, bias3)
    split_scores = Concat <axis = 0> (b, heads, s, s)
    s4 = Reshape (biased, split_scores)
    masked = Add (s4, m)
    p4 = Softmax <axis = -1> (masked)
    p_merge = Concat <axis = 0> (bh, s, s)
    p3 = Reshape (p4, p_merge)
    o3 = MatMul (p3, v3)
    pv_shape = Shape (o3)
    split_out = Concat <axis = 0> (b, heads, s, eight)
    o = Reshape (o3, split_out)
}"""


def _model(make_model):
    return make_model(BLOOM_LIKE)


def _feeds(b=2, s=6, seed=0):
    rng = np.random.default_rng(seed)
    f = {n: rng.standard_normal((b, 4, s, 8)).astype(np.float32) for n in "qkv"}
    f["bias4"] = rng.standard_normal((b, 4, 1, s)).astype(np.float32)
    hidden = np.triu(np.ones((s, s), bool), 1)
    f["m"] = np.broadcast_to(np.where(hidden, np.float32(-1e9), 0), (b, 1, s, s)).astype(np.float32)
    return f


def _run(proto, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def test_3d_attention_becomes_4d_and_fuses(make_model):
    proto = _model(make_model)
    model = import_model(proto)
    options = OptimizeOptions(target="cpu")
    counts = normalize.run(model, options)
    assert counts.get("unmerge_heads") == 2  # the scores' split and the output's split
    matmuls = [n for n in model.graph if n.op_type == "MatMul"]
    assert [len(n.output.shape) for n in matmuls] == [4, 4]
    report = fuse_and_settle(model, options, run_target(options, model.opset))
    assert report.count("attention") == 1, report.summary()
    optimized = run_pipeline(proto, options).proto
    for b, s in ((1, 5), (2, 9)):
        f = _feeds(b, s)
        want = _run(proto, f)
        got = _run(optimized, f)
        assert np.abs(got[0] - want[0]).max() < 1e-5
        assert got[1].tolist() == want[1].tolist() == [4 * b, s, 8]  # the view's shape, as read


def test_a_view_read_elsewhere_stays(make_model):
    """The 3-D scores also leave the graph: nothing is hoisted over them (no recompute)."""
    proto = _model(make_model)
    model = import_model(proto)
    scores = next(n for n in model.graph if n.op_type == "Add").output  # biased, 3-D
    model.graph.set_outputs([*model.graph.outputs, scores])
    normalize.run(model, OptimizeOptions(target="cpu"))
    assert unmerge_heads(model).changed == 0
    shapes = [len(n.output.shape) for n in model.graph if n.op_type == "MatMul"]
    assert shapes[0] == 3
