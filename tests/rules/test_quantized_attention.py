"""Attention in QDQ-quantized models (rule ``quantized_attention``, onnxopt/rules/quantized_attention.py).

Where a QuantizeLinear rounds the probabilities between the softmax and ·V (ONNX Runtime's
``quantize_static`` in QDQ format puts one there), a float attention kernel would change the
outputs by about the quantization error: the block is recognised and refused with its own
code. Where only Q, K and V are quantized, attention fuses over the DequantizeLinear outputs
and every Q/DQ pair stays outside the fused op."""

from __future__ import annotations

from collections import Counter

import onnx
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.rules.quantized_attention import QUANTIZED_PROBABILITIES
from onnxopt.verification import verify_models

ATTENTION = """
g (float[batch, 4, seq, 16] q, float[batch, 4, seq, 16] k, float[batch, 4, seq, 16] v)
    => (float[batch, 4, seq, 16] y)
  <float s = {0.05}, int8 z = {0}, float scale = {0.25}, float ps = {0.0078125}> {
    qq = QuantizeLinear (q, s, z)
    dq = DequantizeLinear (qq, s, z)
    qk = QuantizeLinear (k, s, z)
    dk = DequantizeLinear (qk, s, z)
    qv = QuantizeLinear (v, s, z)
    dv = DequantizeLinear (qv, s, z)
    kt = Transpose <perm = [0, 1, 3, 2]> (dk)
    sc = MatMul (dq, kt)
    ss = Mul (sc, scale)
    p = Softmax <axis = -1> (ss)
    PROBABILITIES
}
"""
FLOAT_PROBABILITIES = "y = MatMul (p, dv)"
ROUNDED_PROBABILITIES = """qp = QuantizeLinear <saturate = 1> (p, ps, z)
    rp = DequantizeLinear (qp, ps, z)
    y = MatMul (rp, dv)"""


def _regions(result, family="attention"):
    return [r for r in result.report.stages["fuse"].regions if r.family == family]


def _qdq(proto: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in proto.graph.node
                   if n.op_type in ("QuantizeLinear", "DequantizeLinear"))


def test_attention_over_dequantized_q_k_v_fuses_with_every_pair_outside(make_model):
    proto = make_model(ATTENTION.replace("PROBABILITIES", FLOAT_PROBABILITIES))
    result = run_pipeline(proto, OptimizeOptions(target="cpu", debug=True))
    assert [(r.rule, r.status) for r in _regions(result)] == [("attention", "fused")]
    assert _qdq(result.proto) == _qdq(proto) == {"QuantizeLinear": 3, "DequantizeLinear": 3}
    assert verify_models(proto, result.proto).ok


def test_rounded_probabilities_are_refused_with_their_own_code(make_model):
    proto = make_model(ATTENTION.replace("PROBABILITIES", ROUNDED_PROBABILITIES), opset=19)
    result = run_pipeline(proto, OptimizeOptions(target="cpu", debug=True))
    regions = [r for r in _regions(result) if r.status != "partial"]
    assert [(r.rule, r.status, r.code) for r in regions] == [
        ("quantized_attention", "refused", QUANTIZED_PROBABILITIES)]
    assert regions[0].detail == (
        "MatMul → Softmax: QuantizeLinear QuantizeLinear_3 rounds the attention probabilities "
        "before ·V (QDQ); a float attention kernel would not round them, so the block stays as "
        "quantized")
    assert _qdq(result.proto) == _qdq(proto)
    assert verify_models(proto, result.proto).ok


def test_quantize_static_encoder_every_block_refused_as_quantized(models_dir, tmp_path):
    pytest.importorskip("onnxruntime.quantization")
    from tests.rules.test_qdq import _qdq as quantize

    dst = tmp_path / "bert.qdq.onnx"
    quantize(models_dir / "bert.dynamo.onnx", dst)
    result = run_pipeline(str(dst), OptimizeOptions(target="cpu", debug=True))
    softmaxes = sum(n.op_type == "Softmax" for n in onnx.load(str(dst)).graph.node)
    regions = _regions(result)
    assert softmaxes == 2
    assert [(r.status, r.code) for r in regions] == [("refused", QUANTIZED_PROBABILITIES)] * 2
    assert verify_models(str(dst), result.proto).ok
