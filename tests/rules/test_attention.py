"""The attention rule: every exporter's attention fuses; look-alikes stay untouched, with reasons."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt import normalize
from onnxopt.importer import import_model
from onnxopt.legality.target import run_target
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import fuse_and_settle, run_pipeline
from onnxopt.verification import verify_models


def _fused_ops(result) -> list:
    return _fused_ops_of(result.model)


def _fused_ops_of(model) -> list:
    return [n for n in model.graph.all_nodes() if n.op_type == "AttentionFused"]


def test_every_attention_block_of_every_model_fuses(model_path):
    """100 %: one AttentionFused per Softmax of the original, and the result computes the same."""
    result = run_pipeline(str(model_path), OptimizeOptions(target="cpu"))
    softmaxes = result.report.nodes_before["Softmax"]
    fusion = result.report.stages["fuse"]
    assert softmaxes > 0
    assert fusion.count("attention") == softmaxes, fusion.summary().get("attention")
    assert fusion.count("attention", "refused") == 0
    report = verify_models(str(model_path), result.proto, runs=3)
    assert report.ok, report.to_json()


@pytest.mark.parametrize("name, kind", [
    ("gpt2.ts", "causal+key_padding"), ("gpt2.dynamo", "causal+key_padding"),
    ("llama.ts", "causal+key_padding"), ("llama.dynamo", "causal+key_padding"),
    ("bert.ts", "key_padding"), ("bert.dynamo", "key_padding"), ("vit.ts", None),
])
def test_masks_are_classified(models_dir, name, kind):
    from onnxopt import fuse, normalize
    from onnxopt.fuse import fuse as run_fuse
    from onnxopt.legality.target import Target
    from onnxopt.rules.attention import Attention

    model = import_model(str(models_dir / f"{name}.onnx"))
    normalize.run(model, OptimizeOptions())
    run_fuse(model, [Attention()], Target())
    nodes = [n for n in model.graph if n.op_type == "AttentionFused"]
    assert nodes
    for n in nodes:
        assert n.attr("mask_kind") == (kind or "none")
        assert n.attr("causal") == int("causal" in (kind or ""))
    assert fuse is not None


def test_grouped_query_attention_reads_unrepeated_kv(models_dir):
    model = import_model(str(models_dir / "llama.dynamo.onnx"))
    from onnxopt import normalize

    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    fuse_and_settle(model, options, run_target(options, model.opset))
    nodes = [n for n in model.graph if n.op_type == "AttentionFused"]
    assert [(n.attr("num_heads"), n.attr("kv_num_heads")) for n in nodes] == [(4, 2), (4, 2)]
    for n in nodes:
        assert n.inputs[1].shape[1] == 2 and n.inputs[2].shape[1] == 2


ATTENTION = """
g (float[batch, 4, seq, 16] q, float[batch, 4, seq, 16] k, float[batch, 4, seq, 16] v,
   float[batch, 1, seq, seq] m) => ({outputs}) {{
    kt = Transpose <perm = [0, 1, 3, 2]> (k)
    s = MatMul (q, kt)
    c = Constant <value = {scale}> ()
    ss = Mul (s, c)
    a = Add (ss, m)
    p = Softmax <axis = {axis}> (a)
    o = MatMul (p, v)
}}
"""


def _attention(make_model, *, outputs="float[batch, 4, seq, 16] o", scale="float {0.25}",
               axis=-1):
    return make_model(ATTENTION.format(outputs=outputs, scale=scale, axis=axis))


def _explain(proto, **options):
    result = run_pipeline(proto, OptimizeOptions(target="cpu", **options))
    fusion = result.report.stages["fuse"]
    return result, [r for r in fusion.regions if r.rule == "attention"]


def _assert_refused(make_model, proto, reason, code):
    result, regions = _explain(proto)
    assert [(r.status, r.detail) for r in regions] == [("refused", reason)]
    assert [r.code for r in regions] == [code]
    assert not _fused_ops(result)
    assert verify_models(proto, result.proto).ok


def test_text_attention_fuses(make_model):
    proto = _attention(make_model)
    result, regions = _explain(proto)
    assert [r.status for r in regions] == ["fused"]
    assert [n.op_type for n in result.model.graph.all_nodes()].count("AttentionFused") == 0  # lowered
    assert verify_models(proto, result.proto).ok


def test_softmax_over_another_axis_is_refused(make_model):
    _assert_refused(make_model, _attention(make_model, axis=2),
                    "Softmax: the softmax runs over axis [2], not the last axis (3)",
                    "not_last_axis")


def test_scale_that_is_not_a_scalar_is_refused(make_model):
    scale = "float[1, 4, 1, 1] {0.25, 0.25, 0.25, 0.5}"
    _assert_refused(make_model, _attention(make_model, scale=scale),
                    "%c: the attention scale is not a scalar (shape [1, 4, 1, 1])",
                    "not_a_scalar")


def test_probabilities_that_are_a_graph_output_are_the_fused_ops_second_output(make_model):
    """The attention weights returned (a graph output): AttentionFused outputs P too, and only
    the decomposition, which computes P whole, may bind it (issue 33)."""
    proto = _attention(make_model, outputs="float[batch, 4, seq, 16] o, float[batch, 4, seq, seq] p")
    result, regions = _explain(proto)
    assert [(r.status, r.detail) for r in regions] == [
        ("fused", "heads 4, scale 0.25, mask additive, probabilities read outside (output P)")]
    (selection,) = result.report.stages["select"].selections
    assert selection.chosen.name == "decompose.AttentionFused"
    rejected = {k.name: r.code for k, r in selection.rejected}
    assert rejected["ort.MultiHeadAttention"] == "probabilities_not_output"
    assert rejected["decompose.AttentionFused.lean"] == "probabilities_not_output"
    assert [o.name for o in result.proto.graph.output] == ["o", "p"]
    assert verify_models(proto, result.proto).ok


def test_scores_that_are_a_graph_output_are_refused(make_model):
    proto = _attention(make_model, outputs="float[batch, 4, seq, 16] o, float[batch, 4, seq, seq] a")
    _assert_refused(make_model, proto, "%a is a graph output, so it must stay computed",
                    "intermediate_is_graph_output")


def test_intermediate_with_an_extra_reader_is_refused(make_model):
    text = ATTENTION.format(outputs="float[batch, 4, seq, 16] o, float[batch, 4, seq, seq] e",
                            scale="float {0.25}", axis=-1).replace(
        "o = MatMul (p, v)", "o = MatMul (p, v)\n    e = Exp (a)")
    proto = make_model(text)
    result, regions = _explain(proto)
    assert [(r.status, r.detail.split(" is also used by ")[0]) for r in regions] == [
        ("refused", "%a")]
    assert [r.code for r in regions] == ["used_outside_match"]
    assert verify_models(proto, result.proto).ok


def test_strict_determinism_refuses_attention(make_model):
    proto = _attention(make_model)
    _, regions = _explain(proto, determinism="strict")
    assert [(r.status, r.detail) for r in regions] == [(
        "refused", ("determinism is strict, and a fused attention (streaming softmax) may change "
                    "the order of its floating-point reductions"))]
    assert [r.code for r in regions] == ["strict_determinism"]


def test_mask_larger_than_the_scores_is_refused(make_model):
    text = ATTENTION.format(outputs="float[batch, 4, seq, 16] o", scale="float {0.25}", axis=-1)
    text = text.replace("float[batch, 1, seq, seq] m", "float[batch, 4, seq, seq] m").replace(
        "k, float[batch, 4, seq, 16] v", "k, float[batch, 4, seq, 16] v").replace(
        "float[batch, 4, seq, 16] q,", "float[batch, 1, seq, 16] q,").replace(
        "float[batch, 4, seq, 16] k,", "float[batch, 1, seq, 16] k,").replace(
        "float[batch, 4, seq, 16] v,", "float[batch, 1, seq, 16] v,")
    proto = make_model(text)
    _, regions = _explain(proto)
    assert [(r.status, r.detail) for r in regions] == [(
        "refused", ("%m: a mask of shape ['batch', 4, 'seq', 'seq'] would enlarge scores "
                    "['batch', 1, 'seq', 'seq']"))]
    assert [r.code for r in regions] == ["mask_enlarges_scores"]


ANTI_CAUSAL = """
g (float[batch, 4, seq, 16] q, float[batch, 4, seq, 16] k, float[batch, 4, seq, 16] v)
  => (float[batch, 4, seq, 16] o) {
    shape = Shape (q)
    two = Constant <value = int64 {2}> ()
    n = Gather (shape, two)
    zero = Constant <value = int64 {0}> ()
    one = Constant <value = int64 {1}> ()
    r = Range (zero, n, one)
    ax0 = Constant <value = int64[1] {0}> ()
    ax1 = Constant <value = int64[1] {1}> ()
    i = Unsqueeze (r, ax1)
    j = Unsqueeze (r, ax0)
    lower = Less (j, i)
    big = Constant <value = float {-1e9}> ()
    nil = Constant <value = float {0}> ()
    m = Where (lower, big, nil)
    kt = Transpose <perm = [0, 1, 3, 2]> (k)
    s = MatMul (q, kt)
    c = Constant <value = float {0.25}> ()
    ss = Mul (s, c)
    a = Add (ss, m)
    p = Softmax <axis = -1> (a)
    o = MatMul (p, v)
}
"""


# T5 with SDPA: a relative-position bias built from position comparisons (it looks
# triangular) with the padding mask added in, handed to attention as one float tensor.
POSITION_BIAS_WITH_PADDING = """
g (float[batch, 4, seq, 16] q, float[batch, 4, seq, 16] k, float[batch, 4, seq, 16] v,
   int64[batch, seq] attention_mask) => (float[batch, 4, seq, 16] o) {
    shape = Shape (q)
    two = Constant <value = int64 {2}> ()
    n = Gather (shape, two)
    zero = Constant <value = int64 {0}> ()
    one = Constant <value = int64 {1}> ()
    r = Range (zero, n, one)
    ax0 = Constant <value = int64[1] {0}> ()
    ax1 = Constant <value = int64[1] {1}> ()
    i = Unsqueeze (r, ax1)
    j = Unsqueeze (r, ax0)
    later = Less (i, j)
    ahead = Constant <value = float {0.75}> ()
    behind = Constant <value = float {-0.5}> ()
    bias = Where (later, ahead, behind)
    keep = Cast <to = 1> (attention_mask)
    onef = Constant <value = float {1}> ()
    dropped = Sub (onef, keep)
    low = Constant <value = float {-3.4028234663852886e38}> ()
    pad2 = Mul (dropped, low)
    axes = Constant <value = int64[2] {1, 2}> ()
    pad = Unsqueeze (pad2, axes)
    m = Add (bias, pad)
    kt = Transpose <perm = [0, 1, 3, 2]> (k)
    s = MatMul (q, kt)
    a = Add (s, m)
    p = Softmax <axis = -1> (a)
    o = MatMul (p, v)
}
"""


def test_a_bias_with_the_padding_mask_added_in_fuses_as_an_additive_mask(make_model):
    proto = make_model(POSITION_BIAS_WITH_PADDING)
    result, regions = _explain(proto)
    assert [r.status for r in regions] == ["fused"], [r.detail for r in regions]
    assert "mask additive (a bias: values between 0 and the masking range)" in regions[0].detail
    assert verify_models(proto, result.proto).ok


def test_gemma2_soft_capped_attention_fuses_and_computes_the_same(models_dir):
    path = str(models_dir / "gemma2.dynamo.onnx")
    result, regions = _explain(path)
    assert [r.status for r in regions] == ["fused", "fused"]
    assert all("soft-cap 50" in r.detail for r in regions)
    assert verify_models(path, result.proto, runs=3).ok


@pytest.mark.parametrize("exporter", ["dynamo", "ts"])
def test_swin_shifted_window_attention_fuses_with_its_per_window_mask(models_dir, exporter):
    path = str(models_dir / f"swin.{exporter}.onnx")
    result, regions = _explain(path)
    assert [r.status for r in regions] == ["fused", "fused"]
    assert "mask additive" in regions[1].detail
    assert verify_models(path, result.proto, runs=3).ok


SOFT_CAPPED = """
g (float[batch, 4, seq, 16] q, float[batch, 4, seq, 16] k, float[batch, 4, seq, 16] v,
   float[batch, 1, seq, seq] m) => (float[batch, 4, seq, 16] o) {{
    kt = Transpose <perm = [0, 1, 3, 2]> (k)
    s = MatMul (q, kt)
    c = Constant <value = float {{0.005}}> ()
    ss = Mul (s, c)
    t = Tanh (ss)
    cap = Constant <value = float {{{cap}}}> ()
    capped = Mul (t, cap)
    a = Add (capped, m)
    p = Softmax <axis = -1> (a)
    o = MatMul (p, v)
}}
"""


def test_soft_capped_scores_fuse_with_the_cap_and_the_whole_scale(make_model):
    model = import_model(make_model(SOFT_CAPPED.format(cap="50.0")))
    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    fuse_and_settle(model, options, run_target(options, model.opset))
    (node,) = _fused_ops_of(model)
    assert node.attr("softcap") == pytest.approx(50.0)
    assert node.attr("scale") == pytest.approx(0.25)
    proto = make_model(SOFT_CAPPED.format(cap="50.0"))
    result, _ = _explain(proto)
    assert verify_models(proto, result.proto).ok


@pytest.mark.parametrize("cap, reason", [
    ("-50.0", "%cap: the soft-cap multiplier is -50, not a positive cap"),
    ("0.0", "%cap: the soft-cap multiplier is 0, not a positive cap"),
])
def test_a_cap_that_is_not_positive_is_refused(make_model, cap, reason):
    proto = make_model(SOFT_CAPPED.format(cap=cap))
    result, regions = _explain(proto)
    assert [(r.status, r.detail) for r in regions] == [("refused", reason)]
    assert [r.code for r in regions] == ["softcap_not_positive"]
    assert verify_models(proto, result.proto).ok


# torch.nn.MultiheadAttention (SigLIP's attention-pooling head) attends on [batch*heads, S, D]
# views with bmm: a learned probe query of length 1 over the tokens' keys.
MERGED_HEADS_3D = """
g (float[X, 1, 16] q, float[X, seq, 16] k, float[X, seq, 16] v) => (float[X, 1, 16] o) {
    kt = Transpose <perm = [0, 2, 1]> (k)
    s = MatMul (q, kt)
    c = Constant <value = float {0.25}> ()
    ss = Mul (s, c)
    p = Softmax <axis = -1> (ss)
    o = MatMul (p, v)
}
"""


def test_attention_on_three_dimensional_views_fuses(make_model):
    proto = make_model(MERGED_HEADS_3D)
    result, regions = _explain(proto)
    assert [(r.status, r.detail) for r in regions] == [("fused", "heads 1, scale 0.25, no mask")]
    assert [r.code for r in regions] == [None]  # a fused region has no refusal
    assert verify_models(proto, result.proto).ok


def test_triangular_mask_that_is_not_causal_is_refused(make_model):
    proto = make_model(ANTI_CAUSAL)
    result, regions = _explain(proto)
    assert len(regions) == 1 and regions[0].status == "refused"
    assert regions[0].detail.endswith(": the mask is built like a causal mask but is not causal")
    assert regions[0].code == "mask_not_causal"
    assert verify_models(proto, result.proto).ok


def test_real_causal_mask_from_ranges_is_proved_causal(make_model):
    proto = make_model(ANTI_CAUSAL.replace("lower = Less (j, i)", "lower = Less (i, j)"))
    from onnxopt import normalize

    model = import_model(proto)
    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    fuse_and_settle(model, options, run_target(options, model.opset))
    (node,) = [n for n in model.graph if n.op_type == "AttentionFused"]
    assert node.attr("causal") == 1 and node.attr("mask_kind") == "causal"


def test_reference_matches_decomposition_in_onnxruntime(make_model):
    """The NumPy reference of AttentionFused agrees with what the fused model computes."""
    import onnxruntime as ort

    from onnxopt.ops.attention import reference

    proto = _attention(make_model)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 4, 5, 16)).astype(np.float32) for _ in range(3))
    m = np.where(rng.random((2, 1, 5, 5)) < 0.2, -1e9, 0).astype(np.float32)
    result = run_pipeline(proto, OptimizeOptions(target="cpu"))
    sess = ort.InferenceSession(result.proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"q": q, "k": k, "v": v, "m": m})
    want = reference(q, k, v, m, scale=0.25)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
