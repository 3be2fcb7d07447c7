"""AttentionFused's P output (issue 33): a node whose probabilities the model also reads binds only
to a kernel that computes P whole (the decomposition); every other kernel refuses with a typed
reason, and a node whose P is unread is unaffected."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.legality.target import Target

# P read: a graph output (the attention weights returned, or a term computed from them).
READ = """
g (float[B,4,S,8] q, float[B,4,S,8] k, float[B,4,S,8] v, float[B,1,S,S] m)
  => (float[B,4,S,8] o, float[B,4,S,S] w) {
  o, p = ai.onnxopt.AttentionFused <num_heads=4, scale=0.35, head_size=8,
        mask_kind="additive"> (q, k, v, m)
  w = Relu (p)
}"""
UNREAD = READ.replace("float[B,4,S,S] w", "float[B,4,S,8] w").replace("w = Relu (p)",
                                                                      "w = Relu (o)")
CPU = Target(device="cpu", ort_version=(1, 31), opset=23)
CUDA_TARGET = Target(device="cuda", ort_version=(1, 31), opset=23, compute_capability=(9, 0))
# Capabilities a kernel is asked about before P: a kernel lacking one is refused for it.
EARLIER = {"provider_not_supported", "dtype_not_supported", "dtype_not_on_cpu",
           "head_size_not_supported"}


def _node(make_model, text):
    from onnxopt.importer import import_model

    model = import_model(make_model(text, opset=23, extra_opsets={"ai.onnxopt": 1}))
    return model, next(n for n in model.graph if n.op_type == "AttentionFused")


@pytest.mark.parametrize("target", [CPU, CUDA_TARGET], ids=["cpu", "cuda"])
def test_only_kernels_that_compute_p_may_bind_a_node_whose_p_is_read(make_model, registry,
                                                                       target):
    _model, node = _node(make_model, READ)
    verdicts = {k.name: k.rejects(node, target, model_opset=23)
                for k in registry if k.implements == "AttentionFused"}
    assert verdicts.pop("decompose.AttentionFused") is None
    p = node.outputs[1].name
    for name, reason in verdicts.items():
        if reason.code in EARLIER:
            continue  # (refused before P is asked about)
        assert (reason.code, reason.text) == (
            "probabilities_not_output", ("does not output the attention probabilities, which "
            f"the model also reads (%{p})")), name
    for_p = {n for n, r in verdicts.items() if r.code == "probabilities_not_output"}
    assert {"ort.MultiHeadAttention", "onnx.Attention-23", "ort.GroupQueryAttention"} <= for_p
    assert ("decompose.AttentionFused.lean" if target is CPU else "pycuda.flash_attention_f32"
            ) in for_p


def test_an_unread_p_changes_nothing(make_model, registry):
    _, node = _node(make_model, UNREAD)
    reasons = [k.rejects(node, CPU, model_opset=23) for k in registry
               if k.implements == "AttentionFused"]
    assert all(r is None or r.code != "probabilities_not_output" for r in reasons)


def test_a_read_p_is_bound_to_the_decomposition_and_computes_the_same(bind_text, rel_err):
    bound = bind_text(READ)
    assert bound.chosen == ["decompose.AttentionFused"]
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((2, 4, 5, 8)).astype(np.float32) for n in "qkv"}
    feeds["m"] = np.where(rng.random((2, 1, 5, 5)) < 0.3, -np.inf, 0).astype(np.float32)
    feeds["m"][..., 0] = 0
    o, w = bound.run(feeds)
    scores = np.einsum("bhsd,bhtd->bhst", feeds["q"], feeds["k"]) * 0.35 + feeds["m"]
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    assert rel_err(w, p) < 1e-5 and rel_err(o, p @ feeds["v"]) < 1e-5
