"""GroupQueryAttention's ``local_window_size`` against AttentionFused's ``window``: what ORT
computes, pinned, so that a binding to GQA passes the band right (window + 1 keys)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxopt import reference as ref
from onnxopt.ops import AttentionAttrs, MaskKind
from onnxopt.refusal import Refusal
from onnxopt.select.ort_attention import gqa_local_window_size

B, S, H, HKV, D = 2, 12, 4, 2, 8


def _gqa(local_window_size: int) -> ort.InferenceSession:
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "seqlens_k", "total"],
                            ["o", "present_k", "present_v"], domain="com.microsoft",
                            num_heads=H, kv_num_heads=HKV, scale=0.3,
                            local_window_size=local_window_size)
    value = helper.make_tensor_value_info
    graph = helper.make_graph([node], "g", [
        value("q", TensorProto.FLOAT, [B, S, H * D]), value("k", TensorProto.FLOAT, [B, S, HKV * D]),
        value("v", TensorProto.FLOAT, [B, S, HKV * D]), value("seqlens_k", TensorProto.INT32, [B]),
        value("total", TensorProto.INT32, [])], [
        value("o", TensorProto.FLOAT, None), value("present_k", TensorProto.FLOAT, None),
        value("present_v", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("window", [1, 4, 30])
def test_local_window_size_is_the_window_plus_the_query(window):
    attrs = AttentionAttrs(num_heads=H, kv_num_heads=HKV, scale=0.3, causal=True, window=window,
                           mask_kind=MaskKind.CAUSAL | MaskKind.WINDOW)
    size = gqa_local_window_size(attrs)
    assert size == window + 1
    rng = np.random.default_rng(window)
    q, k, v = (rng.standard_normal((B, S, h * D)).astype(np.float32) for h in (H, HKV, HKV))
    (o, *_) = _gqa(size).run(None, {"q": q, "k": k, "v": v, "total": np.array(S, np.int32),
                                    "seqlens_k": np.full(B, S - 1, np.int32)})

    def bnsh(x, heads):
        return x.reshape(B, S, heads, D).transpose(0, 2, 1, 3)

    want = ref.attention(bnsh(q, H), bnsh(k, HKV), bnsh(v, HKV), scale=0.3, causal=True,
                         window=window)
    assert np.abs(o - want.transpose(0, 2, 1, 3).reshape(B, S, H * D)).max() < 1e-5


def test_no_band_and_a_symmetric_band():
    assert gqa_local_window_size(AttentionAttrs(causal=True)) == -1
    reason = gqa_local_window_size(AttentionAttrs(window=3, mask_kind=MaskKind.WINDOW))
    assert isinstance(reason, Refusal) and reason.code == "band_not_causal"
