"""The CPU reference kernel of ``ai.onnxopt.cuda::FlashAttention`` (whose semantics the CUDA
kernel mirrors) against the decomposition run by ONNX Runtime -- ``Softmax(Q·Kᵀ·scale + mask)·V``
with the mask spelled out as the additive tensor a model would feed -- for every head size up
to 256 and every mask kind: left and right padding, an additive bias, causal with and without
an offset for cached keys."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

from onnxopt import reference as ref
from onnxopt.runtime import session
from onnxopt.runtime.cuda import DOMAIN

B, H, HKV, SQ, SKV = 2, 4, 2, 7, 11
ELEM = {"float32": ("float", np.float32, 1e-5), "float16": ("float16", np.float16, 3e-3)}


def decomposition(t: str, d: int) -> onnx.ModelProto:
    text = f"""<ir_version: 10, opset_import: ["": 18]>
    g ({t}[{B},{H},{SQ},{d}] q, {t}[{B},{HKV},{SKV},{d}] k, {t}[{B},{HKV},{SKV},{d}] v,
       {t}[{B},{H},{SQ},{SKV}] mask, {t} scale) => ({t}[{B},{H},{SQ},{d}] o) {{
      kr = Unsqueeze(k, axes2)
      ke = Expand(kr, shape5)
      kh = Reshape(ke, shape4)
      vr = Unsqueeze(v, axes2)
      ve = Expand(vr, shape5)
      vh = Reshape(ve, shape4)
      kt = Transpose<perm=[0, 1, 3, 2]>(kh)
      s = MatMul(q, kt)
      ss = Mul(s, scale)
      sm = Add(ss, mask)
      p = Softmax<axis=-1>(sm)
      nan = IsNaN(p)
      zero = CastLike(zero_f, p)
      pz = Where(nan, zero, p)
      o = MatMul(pz, vh)
    }}"""
    model = onnx.parser.parse_model(text)
    rep = H // HKV
    consts = {"axes2": np.array([2], np.int64),
              "shape5": np.array([B, HKV, rep, SKV, d], np.int64),
              "shape4": np.array([B, H, SKV, d], np.int64),
              "zero_f": np.array(0, np.float32)}
    for name, value in consts.items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(value, name))
    return model


FUSED = """<ir_version: 10, opset_import: ["": 18, "{domain}": 1]>
g ({t}[{B},{H},{SQ},{d}] q, {t}[{B},{HKV},{SKV},{d}] k, {t}[{B},{HKV},{SKV},{d}] v,
   {t}[{bias_shape}] bias, int32[{B}] start, int32[{B}] end, int32[{B}] off)
  => ({t}[{B},{H},{SQ},{d}] o) {{
  o = {domain}.FlashAttention <scale={scale}, causal={causal}> (q, k, v, bias, start, end, {off})
}}"""


def run_both(dtype, d, *, causal, start, end, offset, bias_shape, seed=0):
    t, np_dtype, tol = ELEM[dtype]
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, SQ, d)).astype(np_dtype)
    k = rng.standard_normal((B, HKV, SKV, d)).astype(np_dtype)
    v = rng.standard_normal((B, HKV, SKV, d)).astype(np_dtype)
    bias = (rng.standard_normal(bias_shape) * 2).astype(np_dtype)
    scale = float(d) ** -0.5
    start, end = np.array(start, np.int32), np.array(end, np.int32)
    off = None if offset is None else np.array(offset, np.int32)
    # The mask a model would feed: the bias where visible, -inf where not.
    visible = np.stack([ref.attention_mask(SQ, SKV, causal=causal, kv_len=end[b],
                                           kv_start=start[b],
                                           causal_offset=None if off is None else off[b])
                        for b in range(B)])[:, None]
    mask = np.where(visible, np.broadcast_to(bias, (B, H, SQ, SKV)), -np.inf).astype(np_dtype)
    (want,) = ort.InferenceSession(decomposition(t, d).SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(
        None, {"q": q, "k": k, "v": v, "mask": mask, "scale": np.array(scale, np_dtype)})
    text = FUSED.format(domain=DOMAIN, t=t, B=B, H=H, HKV=HKV, SQ=SQ, SKV=SKV, d=d,
                        bias_shape=",".join(map(str, bias_shape)), scale=scale,
                        causal=int(causal), off="off" if off is not None else "")
    if off is None:
        text = text.replace("(q, k, v, bias, start, end, )", "(q, k, v, bias, start, end)")
        text = text.replace(f", int32[{B}] off)", ")")
    fused = onnx.parser.parse_model(text)
    feeds = {"q": q, "k": k, "v": v, "bias": bias, "start": start, "end": end}
    if off is not None:
        feeds["off"] = off
    (got,) = session(fused, providers=["CPUExecutionProvider"]).run(None, feeds)
    return got.astype(np.float64), want.astype(np.float64), tol


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("d", range(8, 257, 8))
def test_every_head_size_with_every_mask_at_once(dtype, d):
    got, want, tol = run_both(dtype, d, causal=True, start=[0, 3], end=[9, 11], offset=[5, 8],
                              bias_shape=(1, H, 1, SKV))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


MASKS = {
    "right_padding": {"causal": False, "start": [0, 0], "end": [11, 6], "offset": None},
    "left_padding": {"causal": False, "start": [4, 0], "end": [11, 11], "offset": None},
    "left_padding_causal": {"causal": True, "start": [2, 0], "end": [11, 11], "offset": None},
    "causal_bottom_right": {"causal": True, "start": [0, 0], "end": [11, 11], "offset": None},
    "causal_cache_offset": {"causal": True, "start": [0, 0], "end": [11, 11], "offset": [1, 9]},
}


@pytest.mark.parametrize("bias_shape", [(1, 1, 1, SKV), (1, H, 1, SKV), (B, 1, SQ, SKV),
                                        (B, H, SQ, SKV)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", list(MASKS))
def test_every_mask_kind_and_bias_broadcast(kind, bias_shape):
    got, want, tol = run_both("float32", 64, bias_shape=bias_shape, **MASKS[kind])
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
