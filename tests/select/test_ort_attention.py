"""AttentionFused kernels: each emitter matches the decomposition in ONNX Runtime (CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.options import OptimizeOptions

RNG = np.random.default_rng(0)
MIN = np.finfo(np.float32).min


def attention(heads=4, kv_heads=4, mask="float[B,1,S,S] m", nan_to_zero=0, d=8, sq="S",
              sk="S", extra=""):
    inputs = [f"float[B,{heads},{sq},{d}] q", f"float[B,{kv_heads},{sk},{d}] k",
              f"float[B,{kv_heads},{sk},{d}] v"] + ([mask] if mask else [])
    args = "q, k, v" + (", m" if mask else "")
    return f"""
    g ({", ".join(inputs)}) => (float[B,{heads},{sq},{d}] o) {{
      o = ai.onnxopt.AttentionFused <num_heads={heads}, kv_num_heads={kv_heads}, scale=0.35,
            head_size={d}, nan_to_zero={nan_to_zero}{extra}> ({args})
    }}"""


def feeds(b=2, heads=4, kv_heads=4, sq=5, sk=5, d=8, mask=(1, 1), fill=None):
    f = {"q": RNG.standard_normal((b, heads, sq, d)).astype(np.float32),
         "k": RNG.standard_normal((b, kv_heads, sk, d)).astype(np.float32),
         "v": RNG.standard_normal((b, kv_heads, sk, d)).astype(np.float32)}
    if mask is not None:
        shape = (b, mask[0], sq if mask[1] == 1 else 1, sk)
        m = np.where(RNG.random(shape) < 0.3, MIN, 0).astype(np.float32)
        if fill is not None:  # a fully masked query row, -inf or float min
            m[1, 0, ..., :] = 0
            m[1, 0, 0 if shape[2] > 1 else ..., :] = fill
        f["m"] = m
    return f


def test_mha_matches_decomposition(check_kernel):
    bound = check_kernel(attention(), "ort.MultiHeadAttention", feeds())
    assert "com.microsoft.MultiHeadAttention" in bound.ops
    assert any(o.domain == "com.microsoft" and o.version == 1 for o in bound.proto.opset_import)


def test_mha_without_mask_and_cross_attention(check_kernel):
    check_kernel(attention(mask=None), "ort.MultiHeadAttention", feeds(mask=None))
    check_kernel(attention(mask="float[B,1,S,T] m", sk="T"), "ort.MultiHeadAttention",
                 feeds(sq=3, sk=7))


def test_mha_expands_a_mask_broadcast_over_queries(check_kernel):
    bound = check_kernel(attention(mask="float[B,1,1,S] m"), "ort.MultiHeadAttention",
                         feeds(mask=(1, 0)))
    assert "Expand" in bound.ops


@pytest.mark.parametrize("fill", [-np.inf, MIN])
def test_mha_keeps_nan_to_zero_on_fully_masked_rows(check_kernel, fill):
    check_kernel(attention(nan_to_zero=1), "ort.MultiHeadAttention", feeds(fill=fill))


def test_mha_reads_the_head_split_directly(bind_text):
    text = """
    g (float[B,S,4,8] x, float[B,4,S,8] k, float[B,4,S,8] v) => (float[B,4,S,8] o) {
      q = Transpose <perm=[0,2,1,3]> (x)
      o = ai.onnxopt.AttentionFused <num_heads=4, kv_num_heads=4, scale=0.35, head_size=8> (q, k, v)
    }"""
    bound = bind_text(text, "ort.MultiHeadAttention")
    # Q reaches MHA as Reshape(x): the model's own head split is bypassed, not undone.
    mha = next(n for n in bound.proto.graph.node if n.op_type == "MultiHeadAttention")
    reshape = next(n for n in bound.proto.graph.node if n.output[0] == mha.input[0])
    assert reshape.op_type == "Reshape" and reshape.input[0] == "x"


def test_mha_repeat_kv_for_grouped_query(check_kernel):
    text = attention(heads=4, kv_heads=2)
    check_kernel(text, "ort.MultiHeadAttention.repeat_kv", feeds(kv_heads=2))


def test_attention23_matches_with_gqa_and_nan_guard(check_kernel):
    text = attention(heads=4, kv_heads=2, nan_to_zero=1)
    bound = check_kernel(text, "onnx.Attention-23", feeds(kv_heads=2, fill=-np.inf), opset=23)
    assert "Attention" in bound.ops and "Transpose" not in bound.ops


def test_lean_decomposition_guards_the_output(check_kernel):
    bound = check_kernel(attention(nan_to_zero=1), "decompose.AttentionFused.lean",
                         feeds(fill=-np.inf))
    isnan = next(n for n in bound.proto.graph.node if n.op_type == "IsNaN")
    last_matmul = [n for n in bound.proto.graph.node if n.op_type == "MatMul"][-1]
    assert isnan.input[0] == last_matmul.output[0]  # on [B,H,S,D], not the probabilities


def test_lean_decomposition_scales_grouped_scores_before_ungrouping(check_kernel):
    bound = check_kernel(attention(heads=4, kv_heads=2), "decompose.AttentionFused.lean",
                         feeds(kv_heads=2))
    nodes = {o: n for n in bound.proto.graph.node for o in n.output}
    mul = next(n for n in bound.proto.graph.node if n.op_type == "Mul")
    assert nodes[mul.input[0]].op_type == "MatMul"  # ORT folds it into FusedMatMul


def test_soft_capped_scores_on_onnx_attention_and_not_on_mha(check_kernel, bind_text, registry):
    text = attention(extra=", softcap=2.0")
    bound = check_kernel(text, "onnx.Attention-23", feeds(), opset=23)
    (node,) = [n for n in bound.proto.graph.node if n.op_type == "Attention"]
    assert {a.name: a.f for a in node.attribute}["softcap"] == pytest.approx(2.0)
    report = bind_text(text, registry=registry).report
    reasons = {k.name: str(r) for k, r in report.selections[0].rejected}
    assert reasons["ort.MultiHeadAttention"] == (
        "does not soft-cap the scores (the node caps them at 2)")
    assert {k.name: r.code for k, r in report.selections[0].rejected}[
        "ort.MultiHeadAttention"] == "softcap_not_supported"
    older = bind_text(text, registry=registry, opset=23,
                      options=OptimizeOptions(target="cpu", ort_version="1.30")).report
    reasons = {k.name: str(r) for k, r in older.selections[0].rejected}
    assert reasons["onnx.Attention-23"] == (
        "soft-caps before the mask as AttentionFused does only as checked with ONNX Runtime "
        "1.31; the target is older")


def test_rejections_say_why(bind_text, registry):
    report = bind_text(attention(heads=4, kv_heads=2), registry=registry).report
    reasons = {k.name: str(r) for k, r in report.selections[0].rejected}
    assert reasons["ort.MultiHeadAttention"] == (
        "needs as many key/value heads as query heads; K/V have 2, Q 4 (grouped-query attention)")
    assert reasons["onnx.Attention-23"] == "needs opset 23; the model imports opset 18"
    assert reasons["ort.GroupQueryAttention"].startswith("applies its own causal mask")
    assert reasons["ort.Attention"].startswith("takes the hidden state and packed QKV")
    codes = {k.name: r.code for k, r in report.selections[0].rejected}
    assert codes["ort.MultiHeadAttention"] == "grouped_query_not_supported"
    assert codes["onnx.Attention-23"] == "model_opset_too_old"
    assert codes["ort.GroupQueryAttention"] == codes["ort.Attention"] == "contract_mismatch"
    report = bind_text(attention(), registry=registry).report
    reasons = {k.name: str(r) for k, r in report.selections[0].rejected}
    assert reasons["decompose.AttentionFused.lean"] == (
        "would emit the plain decomposition: no NaN guard to move, no grouped scale")
    assert reasons["ort.MultiHeadAttention.repeat_kv"] == "no grouped-query heads to repeat"


def test_lean_decomposition_keeps_float16(bind_text, rel_err):
    from onnxopt.ops import FUSED_OPS

    text = attention(heads=4, kv_heads=2, nan_to_zero=1).replace("float[", "float16[")
    with np.errstate(over="ignore"):  # the float32 minimum becomes -inf: a masked key still
        f = {k: v.astype(np.float16) for k, v in feeds(kv_heads=2, fill=-np.inf).items()}
    bound = bind_text(text, "decompose.AttentionFused.lean")
    assert bound.chosen == ["decompose.AttentionFused.lean"]
    want = FUSED_OPS["AttentionFused"].reference(f["q"], f["k"], f["v"], f["m"], num_heads=4,
                                                kv_num_heads=2, scale=0.35, nan_to_zero=1)
    assert rel_err(bound.run(f)[0], want) < 2e-3
