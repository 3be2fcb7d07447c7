"""Layout is decided once, when a kernel is bound: a BSH kernel (MultiHeadAttention) reads the
projection the model split into heads and writes in place of the model's head merge; where the
model spells no split or merge, select emits the conversion. The fused op stays BNSH."""

from __future__ import annotations

import numpy as np

from onnxopt.importer import import_model
from onnxopt.select.layout import model_head_merge

# Q, K, V projected from x, split into 4 heads of 8; the output merged back: [B, S, 32].
SPLIT_AND_MERGE = """
g (float[B,S,32] x, float[32,32] wq, float[B,1,S,S] m) => (float[B,S,32] y)
  <float[B,S,32] qp, float[B,4,S,8] q, float[B,4,S,8] k, float[B,4,S,8] v, float[B,4,S,8] o,
   float[B,S,4,8] ot> {
  heads = Constant <value = int64[4] {0, 0, 4, 8}> ()
  merged = Constant <value = int64[3] {0, 0, 32}> ()
  qp = MatMul (x, wq)
  qs = Reshape (qp, heads)
  q = Transpose <perm = [0, 2, 1, 3]> (qs)
  ks = Reshape (x, heads)
  k = Transpose <perm = [0, 2, 1, 3]> (ks)
  vs = Reshape (x, heads)
  v = Transpose <perm = [0, 2, 1, 3]> (vs)
  o = ai.onnxopt.AttentionFused <num_heads = 4, kv_num_heads = 4, scale = 0.35, head_size = 8>
      (q, k, v, m)
  ot = Transpose <perm = [0, 2, 1, 3]> (o)
  y = Reshape (ot, merged)
}"""

# The same attention with Q arriving in heads and the output read in heads.
NEITHER = """
g (float[B,4,S,8] q, float[B,4,S,8] k, float[B,4,S,8] v, float[B,1,S,S] m)
  => (float[B,4,S,8] o) {
  o = ai.onnxopt.AttentionFused <num_heads = 4, kv_num_heads = 4, scale = 0.35, head_size = 8>
      (q, k, v, m)
}"""


def _feeds(names, b=2, s=5):
    rng = np.random.default_rng(0)
    shapes = {"x": (b, s, 32), "wq": (32, 32), "q": (b, 4, s, 8), "k": (b, 4, s, 8),
              "v": (b, 4, s, 8), "m": (b, 1, s, s)}
    out = {n: rng.standard_normal(shapes[n]).astype(np.float32) for n in names}
    out["m"] = np.where(rng.random(shapes["m"]) < 0.3, -1e9, 0).astype(np.float32)
    return out


def _mha(bound):
    return next(n for n in bound.proto.graph.node if n.op_type == "MultiHeadAttention")


def _producers(bound):
    return {o: n for n in bound.proto.graph.node for o in n.output}


def test_mha_reads_the_model_split_and_takes_the_place_of_its_merge(check_kernel):
    bound = check_kernel(SPLIT_AND_MERGE, "ort.MultiHeadAttention", _feeds(["x", "wq", "m"]))
    mha = _mha(bound)
    assert _producers(bound)[mha.input[0]].op_type == "MatMul"  # the projection, unsplit
    assert mha.output[0] == "y"  # the merge's result, with no Transpose between
    readers = [n.op_type for n in bound.proto.graph.node if "y" in n.input]
    assert readers == []


def test_mha_emits_the_conversions_the_model_does_not_spell(check_kernel):
    bound = check_kernel(NEITHER, "ort.MultiHeadAttention", _feeds(["q", "k", "v", "m"]))
    mha = _mha(bound)
    producers = _producers(bound)
    assert producers[mha.input[0]].op_type == "Reshape"
    assert producers[producers[mha.input[0]].input[0]].op_type == "Transpose"
    assert producers["o"].op_type == "Transpose"  # the packed output split back into heads


def test_bnsh_kernels_keep_the_model_layout(bind_text):
    bound = bind_text(SPLIT_AND_MERGE, "decompose.AttentionFused")
    ops = [n.op_type for n in bound.proto.graph.node]
    assert ops.count("Reshape") == 4 and _producers(bound)["y"].op_type == "Reshape"


def test_a_merge_with_another_reader_is_not_taken(make_model, check_kernel):
    text = SPLIT_AND_MERGE.replace("=> (float[B,S,32] y)",
                                   "=> (float[B,S,32] y, float[B,S,4,8] ot)")
    model = import_model(make_model(text, extra_opsets={"ai.onnxopt": 1}))
    fused = next(n for n in model.graph if n.op_type == "AttentionFused")
    assert model_head_merge(fused.output) is None
    bound = check_kernel(text, "ort.MultiHeadAttention", _feeds(["x", "wq", "m"]))
    assert _producers(bound)["ot"].op_type == "Transpose"
