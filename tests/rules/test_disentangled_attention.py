"""Disentangled attention (DeBERTa-v2): Q·Kᵀ on merged heads plus computed position terms fuses,
with the terms as the fused op's additive bias; a term that reads V is refused."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.verification import verify_models

# K reaches the score MatMul as Reshape(Transpose(K on [B·H, S, D]), [B, H, D, S]), as DeBERTa
# writes it once the heads are unmerged; {term} is added to the scaled scores before the mask.
MERGED = """
g (float[batch, 4, 8, 16] q, float[batch, 4, 8, 16] k, float[batch, 4, 8, 16] v,
   float[1, 4, 8, 16] r, float[batch, 1, 8, 8] m) => (float[batch, 4, 8, 16] o) {{
    s3 = Constant <value = int64[3] {{-1, 8, 16}}> ()
    s4 = Constant <value = int64[4] {{-1, 4, 16, 8}}> ()
    km = Reshape (k, s3)
    kt3 = Transpose <perm = [0, 2, 1]> (km)
    kt = Reshape (kt3, s4)
    s = MatMul (q, kt)
    c = Constant <value = float {{0.1443}}> ()
    ss = Mul (s, c)
    {term}
    tc = Mul (t, c)
    a1 = Add (ss, tc)
    a = Add (a1, m)
    p = Softmax <axis = -1> (a)
    o = MatMul (p, v)
}}
"""
POSITION_TERM = "rt = Transpose <perm = [0, 1, 3, 2]> (r)\n    t = MatMul (q, rt)"
VALUE_TERM = "vt = Transpose <perm = [0, 1, 3, 2]> (v)\n    t = MatMul (q, vt)"


def _regions(proto):
    result = run_pipeline(proto, OptimizeOptions(target="cpu", debug=True))
    return result, [r for r in result.report.stages["fuse"].regions if r.rule == "attention"]


def test_merged_heads_key_with_a_position_term_fuses(make_model):
    proto = make_model(MERGED.format(term=POSITION_TERM))
    result, regions = _regions(proto)
    assert [r.status for r in regions] == ["fused"], [r.detail for r in regions]
    assert "+ bias" in regions[0].detail
    assert verify_models(proto, result.proto).ok


def test_a_term_that_reads_v_is_refused(make_model):
    proto = make_model(MERGED.format(term=VALUE_TERM))
    result, regions = _regions(proto)
    assert [(r.status, r.code) for r in regions] == [("refused", "score_term_reads_v")]
    assert regions[0].detail == "%tc: a term added to the scores reads V (%v): not a score bias"
    assert verify_models(proto, result.proto).ok


def test_a_reshape_that_does_not_split_the_heads_is_not_a_key(make_model):
    """Kᵀ on [B·H, D, S] reshaped to [B, H, S, D]: not K's transpose (the head size 16 lands
    where the keys belong), so the score MatMul stays an unflagged product."""
    text = MERGED.format(term=POSITION_TERM).replace(
        "float[batch, 4, 8, 16] k", "float[batch, 4, 16, 8] k").replace(
        "{-1, 8, 16}", "{-1, 16, 8}")
    _, regions = _regions(make_model(text))
    assert [(r.status, r.code) for r in regions] == [("refused", "merged_key_shape")]


def _deberta_inputs(batch: int, seq: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    for row in range(1, batch):
        mask[row, seq - row * seq // 4:] = 0  # right padding, more on each row
    return {"input_ids": rng.integers(2, 1000, (batch, seq), dtype=np.int64),
            "attention_mask": mask}


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_deberta_v2_attention_fuses_and_computes_the_same(models_dir, exporter):
    path = str(models_dir / f"deberta_v2.{exporter}.onnx")
    result = run_pipeline(path, OptimizeOptions(target="cpu", debug=True))
    fusion = result.report.stages["fuse"]
    assert fusion.count("attention") == result.report.nodes_before["Softmax"] == 2
    assert fusion.count("attention", "refused") == 0
    for region in fusion.regions:
        if region.rule == "attention":
            assert "heads 4" in region.detail and "+ bias" in region.detail
    # the scale's 1/x rewrite on the position terms reaches the output only through the
    # fused region: nothing is refused, one round
    assert result.report.stages["exactness"].to_json()["refused"] == {}
    original = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    fused = ort.InferenceSession(result.proto.SerializeToString(),
                                 providers=["CPUExecutionProvider"])
    for batch, seq in ((2, 8), (3, 16), (1, 5)):
        feeds = _deberta_inputs(batch, seq, seed=seq)
        want = original.run(None, feeds)[0]
        got = fused.run(None, feeds)[0]
        err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
        assert err < 1e-5, (batch, seq, err)


def test_a_merged_key_with_no_four_dimensional_source_is_transposed_back(make_model, fuse_text):
    """K' on [B·H, S, D] computed there (no [B, H, S, D] K to read): the fused op reads the
    score operand transposed back, exactly K."""
    text = MERGED.format(term=POSITION_TERM).replace(
        "km = Reshape (k, s3)", "km0 = Reshape (k, s3)\n    km = Relu (km0)")
    (node,) = fuse_text(text).nodes("AttentionFused")
    key = node.inputs[1]
    assert key.producer.op_type == "Transpose" and list(key.producer.attr("perm")) == [0, 1, 3, 2]
    assert list(key.shape) == [key.shape[0], 4, 8, 16]
    proto = make_model(text)
    result, regions = _regions(proto)
    assert [r.status for r in regions] == ["fused"], [r.detail for r in regions]
    assert verify_models(proto, result.proto).ok
