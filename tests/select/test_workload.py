"""Workload-aware selection: the regimes a model runs in (select/workload.py), ranking in each,
and an attention node switched on its query length where the regimes disagree
(select/regime_switch.py), on the decoder_with_past exports of models/with_past/."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxopt.api import optimize
from onnxopt.errors import UsageError
from onnxopt.importer import import_model
from onnxopt.select import workload as wl

ROOT = Path(__file__).resolve().parents[2]
WITH_PAST = ROOT / "models" / "with_past"
GPT2 = WITH_PAST / "gpt2_with_past.ts.onnx"
LLAMA = WITH_PAST / "llama_with_past.dynamo.onnx"
CAUSAL_BLOCKS = "decompose.AttentionFused.causal_blocks"


@pytest.fixture(scope="module")
def optimized():
    cache: dict = {}

    def get(path: Path, **options):
        key = (path, tuple(sorted((k, str(v)) for k, v in options.items())))
        if key not in cache:
            cache[key] = optimize(str(path), target="cpu", return_result=True, **options)
        return cache[key]

    return get


def test_parse_regime_defaults_and_values():
    assert wl.parse_regime("decode:batch=4,past=512") == wl.Regime("decode", 4, 1, 512)
    assert wl.parse_regime("decode") == wl.Regime("decode", 1, 1, wl.DEFAULT_PAST)
    assert wl.parse_regime("prefill:seq=512") == wl.Regime("prefill", 1, 512, 0)


@pytest.mark.parametrize("text, says", [
    ("generate:batch=1", "the regime must be one of prefill, decode"),
    ("decode:batch=x", "'batch=x' is not KEY=NUMBER with KEY one of batch, seq, past"),
    ("decode:heads=8", "'heads=8' is not KEY=NUMBER"),
    ("prefill:seq=0", "batch and seq must be at least 1"),
])
def test_malformed_regime_is_a_usage_error(text, says):
    with pytest.raises(UsageError, match=says):
        wl.parse_regime(text)


def test_cache_inputs_make_a_decode_regime():
    model = import_model(onnx.load(str(GPT2)))
    assert wl.cache_symbols(model) == {"past_seq": None}
    assert wl.default_workload(model) == (wl.Regime("prefill"),
                                          wl.Regime("decode", 1, 1, wl.DEFAULT_PAST))
    sizes = wl.binding(model, wl.parse_regime("decode:batch=4,past=511"), {"seq"}).sizes
    assert sizes == {"batch": 4, "seq": 1, "total_seq": 512, "past_seq": 511}


def test_a_model_without_cache_has_the_prefill_alone():
    model = import_model(onnx.load(str(ROOT / "models" / "gpt2.ts.onnx")))
    assert wl.cache_symbols(model) == {}
    assert wl.default_workload(model) == (wl.Regime("prefill"),)
    assert wl.binding(model, wl.Regime("prefill")).sizes == {"batch": 1, "seq": 128}


# A prompt long enough for the causal blocks to run their blocks (they start at 256 queries).
LONG_PROMPT = ("prefill:seq=512", "decode")


@pytest.mark.parametrize("path, decode_kernel", [(GPT2, "decompose.AttentionFused"),
                                                 (LLAMA, "decompose.AttentionFused.lean")])
def test_prefill_and_decode_disagree_and_the_node_switches(optimized, path, decode_kernel):
    report = optimized(path, workload=LONG_PROMPT).report.to_json()["select"]
    assert report["workload"] == [
        {"kind": "prefill", "batch": 1, "seq": 512, "past": 0},
        {"kind": "decode", "batch": 1, "seq": 1, "past": wl.DEFAULT_PAST}]
    attention = [n for n in report["nodes"] if n["op"] == "AttentionFused"]
    assert attention
    for node in attention:
        assert node["regimes"] == {"prefill b1 s512 p0": CAUSAL_BLOCKS,
                                   f"decode b1 s1 p{wl.DEFAULT_PAST}": decode_kernel}
        assert node["switch"] == f"queries <= 1: {decode_kernel}; more: {CAUSAL_BLOCKS}"
        assert "no_switch" not in node
    assert report["chosen"][CAUSAL_BLOCKS] == report["chosen"][decode_kernel] == len(attention)


@pytest.mark.parametrize("path, kernel", [(GPT2, "ort.MultiHeadAttention.past"),
                                         (LLAMA, "decompose.AttentionFused.lean")])
def test_the_default_prefill_is_too_short_for_a_switch(optimized, path, kernel):
    """At the default prefill (128 tokens) causal blocks run no blocks, so an If that costs every
    decode step buys nothing: one kernel for both regimes, and the report says why."""
    result = optimized(path)
    report = result.report.to_json()["select"]
    attention = [n for n in report["nodes"] if n["op"] == "AttentionFused"]
    assert attention
    for node in attention:
        assert node["chosen"] == kernel and "switch" not in node
        assert node["regimes"] == {"prefill b1 s128 p0": kernel,
                                   f"decode b1 s1 p{wl.DEFAULT_PAST}": kernel}
        assert node["no_switch"]["code"] == "switch_costs_more"
        assert f"{CAUSAL_BLOCKS} runs no blocks below 256 queries (prefill b1 s128 p0)" \
            in node["no_switch"]["text"]
    assert "If" not in {n.op_type for n in result.proto.graph.node}


def test_a_stated_decode_workload_takes_the_decode_kernel_alone(optimized):
    report = optimized(GPT2, workload=("decode:batch=4,past=511",)).report.to_json()["select"]
    attention = [n for n in report["nodes"] if n["op"] == "AttentionFused"]
    # (ORT's MultiHeadAttention taking over the cache: measured faster in decode steps alone)
    assert {n["chosen"] for n in attention} == {"ort.MultiHeadAttention.past"}
    assert not any("switch" in n or "regimes" in n for n in attention)
    proto = optimized(GPT2, workload=("decode:batch=4,past=511",)).proto
    assert "If" not in {n.op_type for n in proto.graph.node}


def _inputs(sess, batch: int, seq: int, past: int, left: int, right: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(2, 900, (batch, seq), dtype=np.int64)
        elif i.name == "attention_mask":
            mask = np.ones((batch, past + seq), np.int64)
            mask[1:, :left] = 0
            if right:
                mask[1:, past + seq - right:] = 0
            feeds[i.name] = mask
        else:
            feeds[i.name] = rng.standard_normal((batch, i.shape[1], past, i.shape[3]),
                                                dtype=np.float32)
    return feeds


# (batch, new tokens, past, left padding, right padding): decode steps (the If's few-query
# branch), a short chunk, and a prefill long enough for the causal blocks (LLaMA's rotary
# positions have no table; GPT-2's learned one holds 128 positions; a row with no visible
# key, left padding, makes the blocks' form one block).
CASES = [(1, 1, 7, 0, 0), (3, 1, 40, 5, 0), (2, 1, 30, 0, 0), (2, 4, 20, 0, 2),
         (2, 6, 9, 3, 0), (2, 100, 0, 0, 7)]


@pytest.mark.parametrize("path, long", [(GPT2, []), (LLAMA, [(2, 300, 0, 11, 0),
                                                            (1, 300, 0, 0, 0), (1, 280, 24, 0, 0)])])
def test_switched_model_computes_the_original(optimized, path, long):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    original = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    result = optimized(path, workload=LONG_PROMPT)
    assert "If" in {n.op_type for n in result.proto.graph.node}
    opt = ort.InferenceSession(result.proto.SerializeToString(), so,
                               providers=["CPUExecutionProvider"])
    for n, case in enumerate(CASES + long):
        feeds = _inputs(original, *case, seed=n)
        for want, got in zip(original.run(None, feeds), opt.run(None, feeds)):
            # every position, padded ones included
            err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
            assert err < 1e-5, (case, err)


def test_tune_times_the_decode_shapes(optimized, tmp_path):
    result = optimized(GPT2, tune=True, tune_cache=str(tmp_path / "tuning.json"))
    tuning = result.report.to_json()["select"]["tuning"]
    decode = tuning["shapes"][f"decode b1 s1 p{wl.DEFAULT_PAST}"]
    prefill = tuning["shapes"]["prefill b1 s128 p0"]
    # the attention node timed with one query against the cache of past + 1 keys
    assert any(s.startswith("AttentionFused|") and "float32[1, 4, 1, 16]" in s
               and "float32[1, 4, 1025, 16]" in s for s in decode)
    assert any(s.startswith("AttentionFused|") and "float32[1, 4, 128, 16]" in s
               for s in prefill)
    assert tuning["signatures_timed"] == len(set(decode) | set(prefill))


def test_a_fixed_cache_length_is_the_decode_past():
    proto = onnx.load(str(GPT2))
    for vi in proto.graph.input:
        if vi.name.startswith("past_key_values."):
            vi.type.tensor_type.shape.dim[2].dim_value = 64
    model = import_model(proto)
    assert wl.default_workload(model)[1] == wl.Regime("decode", 1, 1, 64)


def test_shape_pins_a_regime_of_its_own():
    model = import_model(onnx.load(str(GPT2)))
    regimes = wl.workload(model, (), {"input_ids": (2, 1), "past_seq": (300,)}, {"seq"})
    assert regimes[-1] == wl.Regime("shape", 2, 1, 300,
                                    sizes=(("batch", 2), ("past_seq", 300), ("seq", 1)))
    assert str(regimes[-1]) == "shape: batch=2, past_seq=300, seq=1"
    sizes = wl.binding(model, regimes[-1], {"seq"}).sizes
    assert sizes == {"batch": 2, "seq": 1, "past_seq": 300, "total_seq": 301}


def test_long_queries_are_where_causal_blocks_start():
    from onnxopt.select import causal_blocks, cost_model
    assert cost_model.LONG_QUERIES == causal_blocks.MIN_SEQUENCE


def test_a_dear_switch_is_not_made_even_for_a_long_prompt(monkeypatch):
    """The If's price in a decode step is what a switch must beat: priced far above the
    prefill's gain, the pair is refused for the one kernel, with the estimates in the reason."""
    from onnxopt.select import cost_model
    monkeypatch.setitem(cost_model.SWITCH_COST, cost_model.CPU, 10.0)
    result = optimize(str(LLAMA), target="cpu", return_result=True, workload=LONG_PROMPT)
    attention = [n for n in result.report.to_json()["select"]["nodes"]
                 if n["op"] == "AttentionFused"]
    assert attention
    for node in attention:
        assert "switch" not in node and node["no_switch"]["code"] == "switch_costs_more"
        assert "runs no blocks" not in node["no_switch"]["text"]
    assert "If" not in {n.op_type for n in result.proto.graph.node}
