"""ort.MultiHeadAttention.past: attention over a key/value cache Concat bound to ORT's
MultiHeadAttention with past_key/past_value and present outputs; the model's present outputs
are the kernel's (byte-equal), logits match the original in ORT with left and right padding,
several past lengths and batch > 1; every refusal has its exact code and sentence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxopt import select as select_stage
from onnxopt.importer import import_model
from onnxopt.legality.target import run_target
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.select.ort_attention_past import NAME
from onnxopt.select.registry import default_registry
from tests.select.conftest import rel_err, session

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ROOT / "models" / "with_past" / "gpt2_with_past.ts.onnx"
LLAMA = ROOT / "models" / "with_past" / "llama_with_past.dynamo.onnx"


def _only_past_kernel_for_attention():
    return [k for k in default_registry() if k.implements != "AttentionFused" or k.name == NAME]


@pytest.fixture(scope="module")
def gpt2_bound():
    patch = pytest.MonkeyPatch()
    patch.setattr(select_stage, "default_registry", _only_past_kernel_for_attention)
    try:
        result = run_pipeline(str(GPT2), OptimizeOptions(target="cpu"))
    finally:
        patch.undo()
    return result


def _feeds(sess, batch: int, seq: int, past: int, side: str, rng) -> dict:
    total = past + seq
    mask = np.ones((batch, total), np.int64)
    for r in range(1, batch):  # every row but the first padded, on ``side``
        pad = min(past, 1 + r * past // (batch + 1)) if side != "none" else 0
        if side == "left":
            mask[r, :pad] = 0
        elif side == "right":  # right padding of the cache: the new tokens follow it
            mask[r, past - pad:past] = 0
    feeds = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(2, 1000, (batch, seq)).astype(np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = mask
        else:
            heads, size = i.shape[1], i.shape[3]
            feeds[i.name] = rng.standard_normal((batch, heads, past, size)).astype(np.float32)
    return feeds


def test_gpt2_cache_concats_become_mha_with_past(gpt2_bound):
    proto = gpt2_bound.proto
    kernels = [s.chosen.name for s in gpt2_bound.report.stages["select"].selections
               if s.op == "AttentionFused"]
    assert kernels == [NAME, NAME]
    mha = [n for n in proto.graph.node if n.op_type == "MultiHeadAttention"]
    assert len(mha) == 2 and all(n.domain == "com.microsoft" for n in mha)
    assert all(len(n.input) == 8 and n.input[6] and n.input[7] for n in mha)  # past in
    presents = {o for n in mha for o in n.output[1:]}
    assert {o.name for o in proto.graph.output if o.name.startswith("present")} == presents
    cache_inputs = {i.name for i in proto.graph.input if i.name.startswith("past")}
    assert not [n for n in proto.graph.node if n.op_type == "Concat" and len(n.input) == 2
                and set(n.input) & cache_inputs]  # the caches' Concat(past, new) are gone


@pytest.mark.parametrize("side", ["none", "left", "right"])
@pytest.mark.parametrize("batch,seq,past", [(1, 1, 7), (3, 1, 9), (2, 1, 16), (3, 3, 5),
                                            (2, 4, 0)])
def test_gpt2_matches_the_original(gpt2_bound, side, batch, seq, past):
    original = session(onnx.load(str(GPT2)))
    bound = session(gpt2_bound.proto)
    feeds = _feeds(original, batch, seq, past, side, np.random.default_rng(batch * 31 + past))
    names = [o.name for o in original.get_outputs()]
    want = dict(zip(names, original.run(None, feeds)))
    got = dict(zip([o.name for o in bound.get_outputs()], bound.run(None, feeds)))
    assert rel_err(got["logits"], want["logits"]) < 1e-4
    for name in names[1:]:  # present: a copy of past and the new keys, the same bytes
        assert np.array_equal(got[name], want[name]), name


def _node(text: str, make_model):
    model = import_model(make_model(text, opset=18, extra_opsets={"ai.onnxopt": 1}))
    node = next(n for n in model.graph.all_nodes() if n.op_type == "AttentionFused")
    kernel = next(k for k in default_registry() if k.name == NAME)
    options = OptimizeOptions(target="cpu")
    return kernel.rejects(node, run_target(options, model.opset), model_opset=model.opset)


def _cache(kv_heads=4, axis=2, k_also="", v_from="cv", outputs="float[B,4,T,8] pk_out"):
    return f"""
    g (float[B,4,S,8] q, float[B,{kv_heads},P,8] past_k, float[B,{kv_heads},P,8] past_v,
       float[B,{kv_heads},S,8] k, float[B,{kv_heads},S,8] v, float[B,1,1,T] m)
      => (float[B,4,S,8] o, {outputs}) {{
      ck = Concat <axis={axis}> (past_k, k)
      cv = Concat <axis=2> (past_v, v)
      o = ai.onnxopt.AttentionFused <num_heads=4, kv_num_heads={kv_heads}, scale=0.35,
            head_size=8> (q, ck, {v_from}, m)
      pk_out = Identity (ck){k_also}
    }}"""


def test_legal_on_a_cache_concat(make_model):
    assert _node(_cache(outputs="float[B,4,T,8] ck").replace(
        "      pk_out = Identity (ck)\n", ""), make_model) is None


def test_refuses_attention_not_over_a_concat(make_model):
    text = """
    g (float[B,4,S,8] q, float[B,4,T,8] k, float[B,4,T,8] v) => (float[B,4,S,8] o) {
      o = ai.onnxopt.AttentionFused <num_heads=4, scale=0.35, head_size=8> (q, k, v)
    }"""
    reason = _node(text, make_model)
    assert reason.code == "no_cache_concat"
    assert reason.text == "%k: K is not a Concat(past, new) of a key/value cache"


def test_refuses_a_cache_read_by_another_node(make_model):
    reason = _node(_cache(), make_model)
    assert reason.code == "cache_read_elsewhere"
    assert reason.text == ("%ck: the concatenated cache is read by other nodes than the "
                           "attention; the kernel's present output could replace only a graph "
                           "output")


def test_refuses_a_grouped_query_cache(make_model):
    reason = _node(_cache(kv_heads=2, outputs="float[B,2,T,8] ck").replace(
        "      pk_out = Identity (ck)\n", ""), make_model)
    assert reason.code == "grouped_query_cache"
    assert reason.text == ("past_key has as many heads as the queries (4); the cache has 2: "
                           "repeating its heads would change the present output")


def test_refuses_a_concat_off_the_sequence_axis(make_model):
    text = """
    g (float[B,4,S,8] q, float[B,4,S,4] past_k, float[B,4,S,4] k, float[B,4,S,8] v,
       float[B,1,1,S] m) => (float[B,4,S,8] o) {
      ck = Concat <axis=3> (past_k, k)
      o = ai.onnxopt.AttentionFused <num_heads=4, scale=0.35, head_size=8> (q, ck, v, m)
    }"""
    reason = _node(text, make_model)
    assert reason.code == "cache_axis"
    assert reason.text == ("%ck: K is concatenated on axis 3 of rank-4 values, not the "
                           "sequence axis of [B, H, S, D]")


def test_llama_grouped_query_cache_is_refused_with_its_code():
    """The LLaMA export has 2 key/value heads for 4 query heads: MHA's past would need them
    repeated, which changes the present outputs; the decomposition (or another kernel) stays."""
    result = run_pipeline(str(LLAMA), OptimizeOptions(target="cpu"))
    for selection in result.report.stages["select"].selections:
        if selection.op != "AttentionFused":
            continue
        reasons = {k.name: r for k, r in selection.rejected}
        assert reasons[NAME].code == "grouped_query_cache"


def test_a_long_prompt_workload_keeps_the_prefill_switch():
    """With a long prefill and a decode regime, the kernel (best at decode, but it takes over
    the cache outside the node, so it cannot sit in one branch of an If) does not displace the
    switch between the decomposition and causal blocks: that pair costs less over the two
    regimes than the kernel alone (it is 1.0x at a 512-token prefill, causal blocks 0.71x)."""
    options = OptimizeOptions(target="cpu", workload=("prefill:seq=512", "decode"))
    result = run_pipeline(str(GPT2), options)
    for selection in result.report.stages["select"].selections:
        if selection.op == "AttentionFused":
            assert selection.switch == ("queries <= 1: decompose.AttentionFused; more: "
                                        "decompose.AttentionFused.causal_blocks")


def test_default_workload_takes_the_kernel_alone():
    """At the default 128-token prefill causal blocks run no blocks: the If would cost every
    decode step for nothing, so the kernel best over both regimes serves both."""
    result = run_pipeline(str(GPT2), OptimizeOptions(target="cpu"))
    attention = [s for s in result.report.stages["select"].selections
                 if s.op == "AttentionFused"]
    assert attention and all(s.chosen.name == NAME and not s.switch for s in attention)
    assert all(s.no_switch.code == "switch_costs_more" for s in attention)


def test_a_decode_workload_takes_the_kernel():
    result = run_pipeline(str(GPT2), OptimizeOptions(target="cpu",
                                                     workload=("decode:batch=1,past=1023",)))
    chosen = {s.chosen.name for s in result.report.stages["select"].selections
              if s.op == "AttentionFused"}
    assert chosen == {NAME}


def test_group_query_attention_refuses_key_padding():
    """GroupQueryAttention places and reads keys by per-row lengths (probed: wrong with any
    padded row, left or right); the LLaMA cache's mask carries key padding."""
    result = run_pipeline(str(LLAMA), OptimizeOptions(target="cpu"))
    attention = [s for s in result.report.stages["select"].selections
                 if s.op == "AttentionFused"]
    assert attention
    for selection in attention:
        reason = {k.name: r for k, r in selection.rejected}["ort.GroupQueryAttention"]
        assert reason.code == "gqa_key_padding"
        assert reason.text == (
            "writes each row's new keys right after its seqlens_k valid keys and attends to the "
            "first seqlens_k + 1 keys: key padding (the mask's, left or right) has no spelling, "
            "and the model's cache puts new keys after the whole past")


@pytest.mark.slow
def test_tune_times_the_kernel_with_the_cache_concat(tmp_path):
    """--tune's micro-model keeps the key/value cache Concat (and its output, where the model
    outputs it), so the kernel that takes it over is timed, not failed, next to the others."""
    cache = tmp_path / "tuning.json"
    run_pipeline(str(GPT2), OptimizeOptions(target="cpu", tune=True, tune_cache=str(cache),
                                            workload=("decode:batch=1,past=64",)))
    entries = json.loads(cache.read_text())
    entries = entries.get("entries", entries)
    attention = [e for key, e in entries.items() if key.startswith("AttentionFused")]
    assert attention
    for entry in attention:
        assert NAME in entry["times_ms"] and not entry["failed"]


MIN = np.finfo(np.float32).min


def _text(outputs: bool = True, mask: bool = True, nan_to_zero: int = 0) -> str:
    outs = ", float[B,4,T,8] ck, float[B,4,T,8] cv" if outputs else ""
    return f"""
    g (float[B,4,S,8] q, float[B,4,P,8] past_k, float[B,4,P,8] past_v, float[B,4,S,8] k,
       float[B,4,S,8] v{", float[B,1,1,T] m" if mask else ""}) => (float[B,4,S,8] o{outs}) {{
      ck = Concat <axis=2> (past_k, k)
      cv = Concat <axis=-2> (past_v, v)
      o = ai.onnxopt.AttentionFused <num_heads=4, scale=0.35, head_size=8,
            nan_to_zero={nan_to_zero}> (q, ck, cv{", m" if mask else ""})
    }}"""


def _text_feeds(b=3, s=1, past=6, mask=True, fill=MIN, side="left"):
    rng = np.random.default_rng(b * 10 + s + past)
    f = {"q": rng.standard_normal((b, 4, s, 8)).astype(np.float32)}
    for name, length in (("past_k", past), ("past_v", past), ("k", s), ("v", s)):
        f[name] = rng.standard_normal((b, 4, length, 8)).astype(np.float32)
    if mask:
        m = np.zeros((b, 1, 1, past + s), np.float32)
        m[1, ..., :2] = fill if side == "left" else 0
        m[1, ..., past - 2:past] = fill if side == "right" else 0
        m[2, ...] = fill  # every key masked in row 2
        f["m"] = m
    return f


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("s,past", [(1, 6), (1, 1), (3, 5)])
def test_present_outputs_become_the_kernels(check_kernel, side, s, past):
    feeds = _text_feeds(s=s, past=past, side=side)
    bound = check_kernel(_text(), NAME, feeds)
    assert "com.microsoft.MultiHeadAttention" in bound.ops and not _cache_concats(bound)
    want = [np.concatenate([feeds["past_k"], feeds["k"]], 2),
            np.concatenate([feeds["past_v"], feeds["v"]], 2)]
    got = bound.run(feeds)
    assert all(np.array_equal(g, w) for g, w in zip(got[1:], want))


def test_caches_read_only_by_attention(check_kernel):
    bound = check_kernel(_text(outputs=False), NAME, _text_feeds())
    assert not _cache_concats(bound)


def _cache_concats(bound) -> list:
    return [n for n in bound.proto.graph.node if n.op_type == "Concat"
            and {"past_k", "past_v"} & set(n.input)]


@pytest.mark.parametrize("fill", [-np.inf, MIN])
def test_nan_to_zero_and_no_mask(check_kernel, fill):
    check_kernel(_text(nan_to_zero=1), NAME, _text_feeds(fill=fill))
    check_kernel(_text(mask=False), NAME, _text_feeds(mask=False))
