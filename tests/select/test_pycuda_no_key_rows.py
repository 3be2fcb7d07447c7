"""A query that sees no key (left padding under a causal mask): the CUDA attention kernel
gives 0, the model the mean of V when its mask fills with one absorbing value (Hugging Face's
float32 minimum). The emitted graph reproduces the model there; with another fill it does not
claim to (the kernel record's assumption). Run through libonnxopt_ops' host path, which
computes what the kernel computes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.runtime import session
from onnxopt.select.pycuda_kernels import ABSORBING_FILL

F32_MIN = float(np.finfo(np.float32).min)


def _model(fill: float, combine: str, kv_heads: int = 2) -> onnx.ModelProto:
    """softmax(Q·Kᵀ/8 + mask)·V, 4 query heads of 64 sharing ``kv_heads`` key/value heads
    (grouped: the float32 CUDA kernel ranks above ORT's there); the mask from a [batch, seq] padding
    input and a causal triangle, joined as HF does (``where``: one fill wherever either masks)
    or by adding two additive masks (``add``: a doubly masked key holds 2·fill)."""
    rep = 4 // kv_heads
    kv = "k, v" if rep == 1 else "kr, vr"
    repeat = "" if rep == 1 else """
      ku = Unsqueeze(k, ax2)
      ke = Expand(ku, rexp)
      kr = Reshape(ke, merged)
      vu = Unsqueeze(v, ax2)
      ve = Expand(vu, rexp)
      vr = Reshape(ve, merged)"""
    if combine == "where":
        mask = """
      both = Or(pad, above4)
      mask = Where(both, fillc, zero)"""
    else:
        mask = """
      padadd = Where(pad, fillc, zero)
      cadd = Where(above4, fillc, zero)
      mask = Add(padadd, cadd)"""
    text = f"""
    <ir_version: 10, opset_import: ["": 18]>
    g (float[batch, 4, seq, 64] q, float[batch, {kv_heads}, seq, 64] k,
       float[batch, {kv_heads}, seq, 64] v, int64[batch, seq] attention_mask)
      => (float[batch, 4, seq, 64] o)
    <float fillc = {{{fill!r}}}, float zero = {{0}}, float scale = {{0.125}}, int64 one = {{1}},
     int64 zero_i = {{0}}, int64 two = {{2}}, int64[2] ax12 = {{1, 2}}, int64[1] ax0 = {{0}},
     int64[1] ax1 = {{1}}, int64[2] ax01 = {{0, 1}}, int64[1] ax2 = {{2}},
     int64[5] rexp = {{1, 1, {rep}, 1, 1}}, int64[4] merged = {{0, 4, -1, 64}}>
    {{
      m = Unsqueeze(attention_mask, ax12)
      zero_m = Cast<to = 7>(zero_i)
      pad = Equal(m, zero_m)
      qs = Shape(q)
      sl = Gather<axis = 0>(qs, two)
      r = Range(zero_i, sl, one)
      ri = Unsqueeze(r, ax1)
      rj = Unsqueeze(r, ax0)
      above = Greater(rj, ri)
      above4 = Unsqueeze(above, ax01){mask}{repeat}
      kt = Transpose<perm = [0, 1, 3, 2]>({kv.split(", ")[0]})
      s = MatMul(q, kt)
      scaled = Mul(s, scale)
      biased = Add(scaled, mask)
      p = Softmax<axis = -1>(biased)
      o = MatMul(p, {kv.split(", ")[1]})
    }}"""
    model = onnx.parser.parse_model(text)
    model.ir_version = 10
    return model


def _feeds(model, seq: int, left_pad: tuple[int, ...], seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    batch = len(left_pad)
    kv_heads = model.graph.input[1].type.tensor_type.shape.dim[1].dim_value
    mask = np.ones((batch, seq), np.int64)
    for row, count in enumerate(left_pad):
        mask[row, :count] = 0
    return {"q": rng.standard_normal((batch, 4, seq, 64)).astype(np.float32),
            "k": rng.standard_normal((batch, kv_heads, seq, 64)).astype(np.float32),
            "v": rng.standard_normal((batch, kv_heads, seq, 64)).astype(np.float32),
            "attention_mask": mask}


def _optimized(model) -> onnx.ModelProto:
    proto = run_pipeline(model, OptimizeOptions(target="cuda")).proto
    assert any(n.op_type == "FlashAttention" for n in proto.graph.node)
    return proto


def _original(model, feeds):
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("kv_heads", [2, 1])
@pytest.mark.parametrize("seq", [7, 19])
def test_rows_that_see_no_key_average_the_values_as_the_model_does(kv_heads, seq):
    model = _model(F32_MIN, "where", kv_heads)
    proto = _optimized(model)
    feeds = _feeds(model, seq, left_pad=(3, 0, seq))  # a row padded everywhere, too
    want = _original(model, feeds)
    # the model's rows that see no key are the mean of V (what the kernel alone leaves 0)
    v = np.repeat(feeds["v"], 4 // kv_heads, axis=1)
    np.testing.assert_allclose(want[0, :, :3], np.broadcast_to(v[0].mean(axis=1)[:, None],
                                                               (4, 3, 64)), rtol=1e-5, atol=1e-6)
    got = session(proto, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-5


def test_the_average_is_emitted_only_for_an_absorbing_fill():
    assert F32_MIN <= ABSORBING_FILL
    for fill, combine in ((-10000.0, "where"), (F32_MIN, "add")):
        # -10000 does not absorb a score; two additive masks hold fill and 2·fill (-inf)
        proto = _optimized(_model(fill, combine))
        assert not any(n.op_type == "ReduceMean" for n in proto.graph.node), (fill, combine)
    proto = _optimized(_model(F32_MIN, "where"))
    assert any(n.op_type == "ReduceMean" for n in proto.graph.node)
