"""decompose.AttentionFused.causal_blocks: causal attention in query blocks, exact everywhere.

The blocks run only where they are exact (at least MIN_SEQUENCE queries, a visible key in
every mask row, no fewer keys than queries); elsewhere the Loop runs one block, the lean
decomposition of the whole rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.select.causal_blocks import MIN_SEQUENCE, TIERS

KERNEL = "decompose.AttentionFused.causal_blocks"
MIN = np.finfo(np.float32).min
ROOT = Path(__file__).resolve().parents[2]


def causal_attention(heads=4, kv_heads=4, nan_to_zero=0, padding=True, sk="S", kind=None,
                     attrs=""):
    kind = kind or ("causal+key_padding" if padding else "causal")
    extra = ", int64[B,T] am" if padding else ""
    return f"""
    g (float[B,{heads},S,8] q, float[B,{kv_heads},{sk},8] k, float[B,{kv_heads},{sk},8] v,
       float[B,1,S,{sk}] m{extra}) => (float[B,{heads},S,8] o) {{
      o = ai.onnxopt.AttentionFused <num_heads={heads}, kv_num_heads={kv_heads}, scale=0.35,
            head_size=8, nan_to_zero={nan_to_zero}, causal=1, mask_kind="{kind}"{attrs}>
            (q, k, v, m{", am" if padding else ""})
    }}"""


def feeds(b, sq, sk=None, heads=4, kv_heads=4, pad="none", fill=MIN, causal=True, seed=0,
          hidden_row=None):
    """Q/K/V and the additive mask a model would build: causal (bottom-right) plus padding."""
    rng = np.random.default_rng(seed)
    sk = sk or sq
    keep = np.ones((b, sk), np.int64)
    if pad == "right":
        keep[1:, sk - sk // 5:] = 0
    elif pad == "left":
        keep[1:, : sk // 5] = 0  # the first rows of those sequences see no key at all
    hidden = np.zeros((sq, sk), bool)
    if causal:
        hidden = np.arange(sk)[None, :] > np.arange(sq)[:, None] + (sk - sq)
    masked = hidden[None, None] | (keep[:, None, None, :] == 0)
    if hidden_row is not None:  # a row that sees no key though key 0 is kept (a window)
        masked[-1, :, hidden_row, :] = True
    return {"q": rng.standard_normal((b, heads, sq, 8)).astype(np.float32),
            "k": rng.standard_normal((b, kv_heads, sk, 8)).astype(np.float32),
            "v": rng.standard_normal((b, kv_heads, sk, 8)).astype(np.float32),
            "m": np.where(masked, fill, 0).astype(np.float32), "am": keep}


@pytest.mark.parametrize("pad", ["none", "right", "left"])
@pytest.mark.parametrize("seq", [7, MIN_SEQUENCE + 44])
def test_matches_the_decomposition(check_kernel, pad, seq):
    check_kernel(causal_attention(), KERNEL, feeds(2, seq, pad=pad))


def test_soft_capped_scores_in_every_block(check_kernel):
    check_kernel(causal_attention(kv_heads=2, attrs=", softcap=2.0"), KERNEL,
                 feeds(2, MIN_SEQUENCE + 44, kv_heads=2, pad="right"))


@pytest.mark.parametrize("fill", [-np.inf, MIN])
@pytest.mark.parametrize("pad", ["right", "left"])
def test_grouped_heads_and_nan_guard(check_kernel, fill, pad):
    text = causal_attention(heads=4, kv_heads=2, nan_to_zero=1)
    check_kernel(text, KERNEL, feeds(2, MIN_SEQUENCE + 3, kv_heads=2, pad=pad, fill=fill))


def test_keys_of_a_cache_precede_the_queries(check_kernel):
    text = causal_attention(sk="T")
    check_kernel(text, KERNEL, feeds(2, MIN_SEQUENCE + 1, sk=MIN_SEQUENCE + 40, pad="right"))
    check_kernel(text, KERNEL, feeds(2, MIN_SEQUENCE + 1, sk=MIN_SEQUENCE - 9))  # fewer keys


def test_without_key_padding(check_kernel):
    f = feeds(1, 2 * MIN_SEQUENCE)
    del f["am"]
    check_kernel(causal_attention(padding=False), KERNEL, f)


def test_one_loop_over_one_copy_of_the_attention(bind_text):
    """The blocks are the iterations of a Loop over one copy of the attention (1, 4 or 8 of
    them, chosen at run time), not one copy per block and tier: ONNX Runtime's session
    creation pays for every node of every subgraph."""
    bound = bind_text(causal_attention(), KERNEL)
    ops = [n.op_type for n in bound.proto.graph.node]
    assert ops.count("Loop") == 1
    assert "If" not in ops and "Softmax" not in ops
    (loop,) = [n for n in bound.proto.graph.node if n.op_type == "Loop"]
    (body,) = [a.g for a in loop.attribute if a.name == "body"]
    assert [n.op_type for n in body.node].count("Softmax") == 1


def test_block_bounds_are_computed_outside_the_loop(bind_text):
    """The body gathers its block's bounds from one range computed outside it: it divides
    nothing itself (ONNX Runtime's session creation pays for every body node)."""
    bound = bind_text(causal_attention(), KERNEL)
    ops = [n.op_type for n in bound.proto.graph.node]
    assert ops.count("Range") == 1
    (loop,) = [n for n in bound.proto.graph.node if n.op_type == "Loop"]
    (body,) = [a.g for a in loop.attribute if a.name == "body"]
    body_ops = [n.op_type for n in body.node]
    assert body_ops.count("Gather") == 2
    assert "Div" not in body_ops and "Range" not in body_ops


@pytest.mark.parametrize("pad", ["none", "right"])
def test_eight_blocks_at_long_sequences(check_kernel, pad):
    seq = TIERS[1][0] + 37
    check_kernel(causal_attention(heads=2, kv_heads=1, nan_to_zero=1), KERNEL,
                 feeds(2, seq, heads=2, kv_heads=1, pad=pad))


@pytest.mark.parametrize("fill", [-np.inf, MIN])
def test_a_row_without_visible_keys_while_key_0_is_kept(check_kernel, fill):
    check_kernel(causal_attention(), KERNEL, feeds(2, MIN_SEQUENCE + 8, fill=fill, hidden_row=200))


@pytest.mark.parametrize(("seq", "pad", "hidden_row", "blocks"), [
    (MIN_SEQUENCE, "none", None, True), (MIN_SEQUENCE, "right", None, True),
    (TIERS[1][0], "right", None, True),
    (MIN_SEQUENCE - 1, "none", None, False), (MIN_SEQUENCE, "none", 100, False)])
def test_takes_the_blocks_only_where_exact(bind_text, rel_err, seq, pad, hidden_row, blocks):
    """Fed a mask that hides nothing after the diagonal, the blocks (which skip those keys)
    and the whole rows disagree — which shows how many blocks the Loop ran."""
    bound = bind_text(causal_attention(), KERNEL)
    whole = bind_text(causal_attention(), "decompose.AttentionFused")
    f = feeds(2, seq, pad=pad, causal=False, hidden_row=hidden_row)
    err = rel_err(bound.run(f)[0], whole.run(f)[0])
    assert (err > 1e-3) == blocks, err


def test_left_padding_runs_whole_rows(bind_text, rel_err):
    """Left padding leaves the first rows with no visible key; with a float-minimum mask the
    whole-row Softmax spreads them over every key, which blocks would not (they would differ)."""
    bound = bind_text(causal_attention(), KERNEL)
    whole = bind_text(causal_attention(), "decompose.AttentionFused")
    f = feeds(2, MIN_SEQUENCE + 10, pad="left")
    assert rel_err(bound.run(f)[0], whole.run(f)[0]) == 0.0


def test_rejections_say_why(bind_text, registry):
    plain = """
    g (float[B,4,S,8] q, float[B,4,S,8] k, float[B,4,S,8] v, float[B,1,S,S] m) => (float[B,4,S,8] o) {
      o = ai.onnxopt.AttentionFused <num_heads=4, kv_num_heads=4, scale=0.35, head_size=8,
            mask_kind="additive"> (q, k, v, m)
    }"""
    reason = _reason(bind_text(plain, registry=registry))
    assert reason == "needs a mask proved causal or a band"
    single_head = """
    g (float[B,S,8] q, float[B,S,8] k, float[B,S,8] v, float[B,S,S] m) => (float[B,S,8] o) {
      o = ai.onnxopt.AttentionFused <num_heads=1, kv_num_heads=1, scale=0.35, head_size=8,
            causal=1, mask_kind="causal"> (q, k, v, m)
    }"""
    assert _reason(bind_text(single_head, registry=registry)) == \
        "needs rank-4 Q, K and V in BNSH layout"
    static = causal_attention().replace(",S,", ",64,").replace(",S]", ",64]")
    assert _reason(bind_text(static, registry=registry)) == \
        f"the model has 64 queries, fewer than the {MIN_SEQUENCE} from which the blocks run"
    cuda = bind_text(causal_attention(), registry=registry,
                     options=OptimizeOptions(target="cuda"))
    assert _reason(cuda) == "runs only on CPU"


def _reason(bound) -> str:
    return {k.name: str(r) for k, r in bound.report.selections[0].rejected}[KERNEL]


@pytest.mark.parametrize("name", ["llama.ts.onnx", "llama.dynamo.onnx", "qwen2.dynamo.onnx"])
def test_exported_decoders_at_long_sequences(name, tmp_path):
    """Real exports (rotary positions, so longer than their 128-position configs allow
    elsewhere): chosen for every attention block, and equal to the original in ONNX Runtime
    with the blocks taken (right padding) and not (left padding)."""
    import onnxruntime as ort

    from onnxopt.exporter import save_model
    from onnxopt.pipeline import run_pipeline

    result = run_pipeline(str(ROOT / "models" / name), OptimizeOptions(target="cpu"))
    chosen = [s.chosen.name for s in result.report.stages["select"].selections
              if s.op == "AttentionFused"]
    assert chosen and set(chosen) == {KERNEL}
    out = tmp_path / "opt.onnx"
    save_model(result.proto, result.external, str(out))
    onnx.checker.check_model(str(out))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    a, b = (ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"])
            for p in (ROOT / "models" / name, out))
    rng = np.random.default_rng(1)
    seq = MIN_SEQUENCE + 50
    for pad in ("right", "left"):
        f = {}
        for i in a.get_inputs():
            if i.name == "attention_mask":
                m = np.ones((2, seq), np.int64)
                m[1, -40:] = 0 if pad == "right" else 1
                if pad == "left":
                    m[1, :40] = 0
                f[i.name] = m
            elif i.name == "position_ids":
                f[i.name] = np.tile(np.arange(seq), (2, 1))
            else:
                f[i.name] = rng.integers(2, 1000, (2, seq)).astype(np.int64)
        for x, y in zip(a.run(None, f), b.run(None, f)):
            assert np.abs(x - y).max() / max(1.0, np.abs(x).max()) < 1e-4


def test_tune_times_both_sides_of_the_switch(bind_text, kernel, monkeypatch, tmp_path):
    """The blocks switch plans at MIN_SEQUENCE queries, so --tune times every candidate at the
    representative length and at a longer one, and ranks by the geometric mean; it measures
    twice, the second time to confirm (tuning.tuned_selection)."""
    import json

    from onnxopt.select import tuning

    lengths = []
    real = tuning.measure

    def spy(model, node, kernels, target, binding, **kwargs):
        lengths.append(binding.default)
        return real(model, node, kernels, target, binding, runs=3)

    monkeypatch.setattr(tuning, "measure", spy)
    cache = tmp_path / "tuning.json"
    bound = bind_text(causal_attention(), options=OptimizeOptions(
        target="cpu", tune=True, tune_cache=str(cache)),
        registry=[kernel(KERNEL), kernel("decompose.AttentionFused")])
    assert lengths == [128, 2 * MIN_SEQUENCE] * 2
    (selection,) = bound.report.selections
    assert selection.basis == "tuned"
    keys = list(json.loads(cache.read_text())["entries"])
    assert len(keys) == 1 and f"|and seq {2 * MIN_SEQUENCE}|" in keys[0]


@pytest.mark.parametrize("name", ["gpt2.ts.onnx", "gpt2.dynamo.onnx"])
def test_not_taken_where_learned_positions_bound_the_sequence(name):
    """GPT-2's positions are rows of a learned table (128 in these exports): no sequence the
    original runs reaches the blocks, whose Loops would only cost the load."""
    from onnxopt.pipeline import run_pipeline

    result = run_pipeline(str(ROOT / "models" / name), OptimizeOptions(target="cpu"))
    attention = [s for s in result.report.stages["select"].selections
                 if s.op == "AttentionFused"]
    assert attention and all(s.chosen.name != KERNEL for s in attention)
    for s in attention:
        assert {k.name: str(r) for k, r in s.rejected}[KERNEL] == (
            "seq is at most 128 (its positions index a table of 128 rows), fewer than the "
            f"{MIN_SEQUENCE} queries from which the blocks run")
    assert not any(n.op_type == "Loop" for n in result.proto.graph.node)


def _positions_model(start: int = 0, rows: int = 100, limit_dim: int = 1,
                     axis: int = 0) -> onnx.ModelProto:
    """Token embeddings plus ``table[Range(start, dim, 1)]``, dim the input's axis
    ``limit_dim`` (1: the sequence)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Shape", ["ids"], ["shape"]),
        helper.make_node("Gather", ["shape", "axis"], ["seq"], axis=0),
        helper.make_node("Range", ["start", "seq", "one"], ["positions"]),
        helper.make_node("Unsqueeze", ["positions", "zero_axis"], ["position_rows"]),
        helper.make_node("Gather", ["table", "position_rows"], ["position_vectors"], axis=axis),
        helper.make_node("Gather", ["tokens", "ids"], ["token_vectors"], axis=0),
        helper.make_node("Add", ["token_vectors", "position_vectors"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(limit_dim, np.int64), "axis"),
             numpy_helper.from_array(np.array(start, np.int64), "start"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero_axis"),
             numpy_helper.from_array(np.zeros((rows, 4), np.float32), "table"),
             numpy_helper.from_array(np.zeros((10, 4), np.float32), "tokens")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, 100),
    ({"start": 1}, None),  # positions from 1: not 0 .. S-1
    ({"rows": MIN_SEQUENCE}, None),  # a table as long as the blocks need: no bound kept
    ({"limit_dim": 0}, None),  # counts to the batch, not the sequence
    ({"axis": 1}, None),  # the positions pick columns: the rows say nothing
])
def test_position_table_rows(kwargs, expected):
    from onnxopt import normalize
    from onnxopt.importer import import_model
    from onnxopt.select.causal_blocks import position_table_rows

    model = import_model(_positions_model(**kwargs))
    normalize.run(model, OptimizeOptions(target="cpu"))
    assert position_table_rows(model.graph, "S") == expected
    assert position_table_rows(model.graph, 64) is None  # a fixed length: not a symbol
