"""Relative-position attention (VITS's text encoder, issue 33): the relative-key term, computed
from Q, is a score bias like DeBERTa's; the relative-value term reads the probabilities P, which
AttentionFused outputs too (its second output, P), so the block fuses and P is computed once.
Refused, with the reason: a score term that reads V, P read before SDPA's NaN guard, V computed
after P."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxopt
from onnxopt import evaluation
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.verification import compare, verify_models

VOCAB = 1000  # models/export.py VOCAB

# A VITS-like block on [B·H, S, ·] views, heads 2: scores Q·Kᵀ·c plus a relative-key term from
# Q (here Q times a constant table), the mask added on the 4-D view, the Softmax on the merged
# view, P·V split back to 4-D; {value_term} adds a term computed from P (or nothing).
BLOCK = """
g (float[B, 2, 6, 8] q, float[B, 2, 6, 8] k, float[B, 2, 6, 8] v, float[B, 1, 6, 6] m)
  => (float[B, 2, 6, 8] o) <float c = {{0.35}}, float[8, 6] table = {{{table}}},
     float[6, 8] rel_v = {{{rel_v}}}, int64[3] merge = {{-1, 6, 6}},
     int64[3] merge_v = {{-1, 6, 8}}, int64[4] split = {{-1, 2, 6, 6}},
     int64[4] split_o = {{-1, 2, 6, 8}}> {{
    q3 = Reshape (q, merge_v)
    k3 = Reshape (k, merge_v)
    kt = Transpose <perm = [0, 2, 1]> (k3)
    s3 = MatMul (q3, kt)
    ss = Mul (s3, c)
    rk = MatMul (q3, table)
    biased3 = Add (ss, rk)
    biased = Reshape (biased3, split)
    masked = Add (biased, m)
    masked3 = Reshape (masked, merge)
    p3 = Softmax <axis = -1> (masked3)
    p4 = Reshape (p3, split)
    pv = MatMul (p4, v)
    {value_term}
}}
"""
VALUE_TERM = """rv3 = MatMul (p3, rel_v)
    rv = Reshape (rv3, split_o)
    o = Add (pv, rv)"""
NO_VALUE_TERM = "o = Identity (pv)"


def _block(value_term: str) -> str:
    rng = np.random.default_rng(3)
    table = ", ".join(f"{x:.4f}" for x in rng.standard_normal(48))
    rel_v = ", ".join(f"{x:.4f}" for x in rng.standard_normal(48))
    return BLOCK.format(table=table, rel_v=rel_v, value_term=value_term)


def _attention(result) -> list:
    """The attention regions fused or refused (partial matches elsewhere left out)."""
    return [r for r in result.report.stages["fuse"].regions
            if r.family == "attention" and r.status != "partial"]


def _fuse(proto):
    result = run_pipeline(proto, OptimizeOptions(target="cpu", debug=True))
    return result, _attention(result)


def test_a_term_that_reads_the_probabilities_reads_the_fused_ops_p(make_model):
    proto = make_model(_block(VALUE_TERM))
    result, regions = _fuse(proto)
    assert [(r.status, r.detail) for r in regions] == [
        ("fused", ("heads 2, scale 0.35, mask additive, + bias, probabilities read outside "
         "(output P)"))]
    (node,) = [n for n in result.model.graph.all_nodes() if n.op_type == "Softmax"]
    assert node.metadata.get("onnxopt.kernel") == "decompose.AttentionFused"  # P computed once
    (selection,) = [s for s in result.report.stages["select"].selections
                    if s.op == "AttentionFused"]
    assert selection.chosen.name == "decompose.AttentionFused"
    assert {k.name: r.code for k, r in selection.rejected}["ort.MultiHeadAttention"] == \
        "probabilities_not_output"
    assert verify_models(proto, result.proto).ok


def test_without_the_value_term_the_relative_key_term_is_a_bias(make_model):
    proto = make_model(_block(NO_VALUE_TERM))
    result, regions = _fuse(proto)
    assert [(r.status, r.detail) for r in regions] == [
        ("fused", "heads 2, scale 0.35, mask additive, + bias")]
    assert verify_models(proto, result.proto).ok


def test_other_intermediates_read_outside_keep_the_general_reason(make_model):
    """Only the probabilities are an output of the fused op: scores read elsewhere are the
    driver's own refusal, unchanged (with P read outside as well)."""
    text = _block(VALUE_TERM).replace(
        "=> (float[B, 2, 6, 8] o)", "=> (float[B, 2, 6, 8] o, float[B, 2, 6, 6] w)").replace(
        "o = Add (pv, rv)", "o = Add (pv, rv)\n    w = Relu (masked)")
    proto = make_model(text)
    result, regions = _fuse(proto)
    assert [(r.status, r.code) for r in regions] == [("refused", "used_outside_match")]
    assert regions[0].detail.startswith("%masked is also used by ")
    assert verify_models(proto, result.proto).ok


def test_a_relative_key_term_that_reads_v_is_refused(make_model):
    """A term added to the scores computed from V (here V times the table) is not a score bias:
    the fused op would read V twice, once inside its own arithmetic."""
    text = _block(VALUE_TERM).replace("rk = MatMul (q3, table)",
                                      "v3 = Reshape (v, merge_v)\n    rk = MatMul (v3, table)")
    proto = make_model(text)
    result, regions = _fuse(proto)
    assert [(r.status, r.code) for r in regions] == [("refused", "score_term_reads_v")]
    # (the term as the 4-D scores read it once the heads are unmerged)
    assert regions[0].detail == (
        "%MatMul_5_out0: a term added to the scores reads V (%v): not a score bias")
    assert verify_models(proto, result.proto).ok


# SDPA's NaN guard after the softmax; {reader} reads the probabilities outside P·V.
GUARDED = """
g (float[B, 2, 6, 8] q, float[B, 2, 6, 8] k, float[B, 2, 6, 8] v, float[B, 1, 6, 6] m)
  => (float[B, 2, 6, 8] o, float[B, 2, 6, 6] w) <float c = {{0.35}}, float zero = {{0.0}}> {{
    s = MatMul (q, kt)
    {v_after}
    ss = Mul (s, c)
    masked = Add (ss, m)
    p = Softmax <axis = -1> (masked)
    nan = IsNaN (p)
    g = Where (nan, zero, p)
    {v_late}
    o = MatMul (g, vv)
    w = Relu ({reader})
}}
"""


def _guarded(reader: str, v_late: bool = False) -> str:
    text = GUARDED.format(reader=reader, v_after="", v_late="vv = Relu (v)" if v_late else "")
    text = text.replace("s = MatMul (q, kt)", "kt = Transpose <perm = [0, 1, 3, 2]> (k)\n"
                        "    s = MatMul (q, kt)" + ("" if v_late else "\n    vv = Relu (v)"))
    return text


def test_guarded_probabilities_read_outside_are_the_fused_ops_p(make_model):
    proto = make_model(_guarded("g"))
    result, regions = _fuse(proto)
    assert [(r.status, r.detail) for r in regions] == [
        ("fused", "heads 2, scale 0.35, mask additive, probabilities read outside (output P)")]
    assert verify_models(proto, result.proto).ok


def test_probabilities_read_before_the_nan_guard_are_refused(make_model):
    """AttentionFused's P is NaN-guarded like its output: the softmax before the guard is not
    what it outputs."""
    proto = make_model(_guarded("p"))
    result, regions = _fuse(proto)
    assert [(r.status, r.code) for r in regions] == [("refused", "probabilities_read_outside")]
    assert regions[0].detail == (
        "%p: the attention probabilities are read before the NaN guard by Relu_1 (Relu): "
        "AttentionFused outputs them after it")
    assert verify_models(proto, result.proto).ok


def test_v_computed_after_the_probabilities_read_outside_is_refused(make_model):
    """The fused node takes P's place in the graph (its other readers follow P), so V must be
    computed before it."""
    proto = make_model(_guarded("g", v_late=True))
    result, regions = _fuse(proto)
    assert [(r.status, r.code) for r in regions] == [("refused", "probabilities_read_outside")]
    assert regions[0].detail == (
        "%vv: V is computed after the attention probabilities %g, which are also read outside "
        "P·V: AttentionFused, which outputs them, would have to come before V")
    assert verify_models(proto, result.proto).ok


# ------------------------------------------------------------------ the exported VITS encoder


def _inputs(batch: int, seq: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    for row in range(1, batch):
        mask[row, seq - row * seq // 4:] = 0  # right padding, more on each row
    return {"input_ids": rng.integers(2, VOCAB, (batch, seq), dtype=np.int64),
            "attention_mask": mask}


def _assert_same(original, optimized) -> None:
    want_s = ort.InferenceSession(original, providers=["CPUExecutionProvider"])
    got_s = ort.InferenceSession(optimized.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, seq in ((2, 8), (3, 16), (2, 3)):  # (3: shorter than the window's 9 offsets)
        feeds = _inputs(batch, seq, seed=seq)
        want = want_s.run(None, feeds)[0]
        got = got_s.run(None, feeds)[0]
        err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
        assert err < 1e-5, (batch, seq, err)


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_vits_attention_fuses_with_p_as_an_output(models_dir, exporter):
    """Both exports: the one attention block fuses (the relative-key term as a bias, P read by
    the relative-value term from the fused op's P), is bound to the decomposition, and the
    model computes the same at two lengths with padding."""
    path = str(models_dir / f"vits.{exporter}.onnx")
    result = run_pipeline(path, OptimizeOptions(target="cpu", debug=True))
    regions = _attention(result)
    assert [(r.status, r.detail) for r in regions] == [
        ("fused", "heads 2, mask additive, + bias, probabilities read outside (output P)")]
    assert result.report.nodes_before["Softmax"] == 1
    assert [s.chosen.name for s in result.report.stages["select"].selections
            if s.op == "AttentionFused"] == ["decompose.AttentionFused"]
    # (the normalized graph is larger — unmerge_heads' run-time head splits — the output is not)
    assert sum(result.report.nodes_after.values()) <= sum(result.report.nodes_before.values())
    _assert_same(path, result.proto)


def _without_value_term(path: str) -> onnx.ModelProto:
    """The export with its relative-value term dropped (``attn_output += rel_pos_bias`` made
    ``attn_output``): what VITS's attention would be if only its scores were relative."""
    proto = onnx.load(path)
    nodes = proto.graph.node
    softmax = next(n for n in nodes if n.op_type == "Softmax")
    pv = next(n for n in nodes if n.op_type == "MatMul" and softmax.output[0] in n.input)
    add = next(n for n in nodes if n.op_type == "Add" and pv.output[0] in n.input)
    add.op_type = "Identity"
    del add.input[:]
    add.input.append(pv.output[0])
    return proto


def test_vits_dynamo_relative_key_term_alone_fuses_as_a_bias(models_dir, tmp_path):
    """Without the value term P is read by P·V alone: one output, any kernel."""
    proto = _without_value_term(str(models_dir / "vits.dynamo.onnx"))
    path = tmp_path / "vits_no_value_term.onnx"
    onnx.save_model(proto, path)
    result = run_pipeline(str(path), OptimizeOptions(target="cpu", debug=True))
    regions = _attention(result)
    assert [(r.status, r.detail) for r in regions] == [
        ("fused", "heads 2, mask additive, + bias")]
    _assert_same(str(path), result.proto)


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_vits_normalized_is_bitwise(models_dir, exporter, tmp_path, monkeypatch):
    """Normalization alone (softmax_out_of_merge among it) computes bit for bit what the model
    did (ONNX Runtime running the ops as written, as tests/test_no_fuse_bitwise.py does)."""
    plain = evaluation.session
    monkeypatch.setattr(compare.evaluation, "session",
                        lambda *a, **k: plain(*a, **{**k, "optimize": False}))
    path = models_dir / f"vits.{exporter}.onnx"
    out = tmp_path / "normalized.onnx"
    onnxopt.optimize(str(path), output=out, rules=False)
    report = onnxopt.verify(path, out)
    assert report.ok and report.bitwise, [(o.name, o.max_abs) for o in report.outputs]
