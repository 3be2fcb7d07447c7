"""A bfloat16 mask is probed like any other: the probe reads it widened to float32, since
ONNX Runtime's Python binding returns no bfloat16 array ("No corresponding Numpy type")."""

from __future__ import annotations

from onnxopt.fuse import MatchStatus
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.runtime.ops.examples import attention_model


def _attention(model):
    regions = run_pipeline(model, OptimizeOptions()).report.stages["fuse"].regions
    return [r for r in regions if r.family == "attention"]


def test_a_bfloat16_causal_and_padding_mask_is_evaluated_and_the_block_fuses():
    (region,) = _attention(attention_model(dtype="bfloat16"))
    assert region.status == MatchStatus.FUSED, region.detail
    assert "mask" in region.detail


def test_the_float16_spelling_of_the_same_block_fuses_the_same_way():
    (half,) = _attention(attention_model(dtype="float16"))
    (bf16,) = _attention(attention_model(dtype="bfloat16"))
    assert half.status == bf16.status == MatchStatus.FUSED
