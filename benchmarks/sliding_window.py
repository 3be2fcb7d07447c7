"""Sliding-window attention on CPU: the original export, onnxopt and the two peers (issue 33).

    python benchmarks/sliding_window.py
    python benchmarks/sliding_window.py --seq 2048 --window 256 --runs 3 --exporter dynamo
    python benchmarks/sliding_window.py --core --runs 7     # one attention node, block counts
    python benchmarks/sliding_window.py --families          # coverage: 4 families x 2 x 2

Builds a mid-size Mistral (hidden 512, 8 heads of 64, 4 key/value heads, ``--layers``
layers, MLP 2048, vocab 8192; random weights, seeded) whose ``sliding_window`` is
``--window`` keys (each query sees itself and the ``window - 1`` keys before it), exports it
with ``--exporter`` (SDPA attention), and times, in ONNX Runtime on the CPU provider with 1
intra-op thread and ``allow_spinning`` off, at batch 1 and ``--seq`` tokens (no padding):

- ``original``: the export as is;
- ``ort-opt``: ``onnxruntime.transformers.optimizer.optimize_model`` (model_type ``gpt2``,
  as benchmarks/cpu_speed.py uses for decoders it has no type for; ``bert`` where that
  fails), default opt_level;
- ``onnxscript``: ``onnxscript.rewriter.ort_fusions.optimize_for_ort``;
- ``onnxopt``: ``onnxopt optimize --target cpu`` (the band proved, the query blocks reading
  only the keys within the window);
- ``onnxopt-noband``: the same with the query blocks reading every key up to their last row
  (the causal blocks as before issue 33), to show what skipping the keys outside the band
  is worth.

``--core``: one ``AttentionFused`` node instead (8 heads of 64, the band's additive mask of
``window - 1`` keys before the query) bound to the plain decomposition, to the query blocks
reading every key before their rows, and to the band's blocks at several block sizes
(onnxopt's choice among them), interleaved the same way.

``--families``: coverage, not speed. Small sliding-window and local-attention models of four
families (Mistral ``sliding_window=6``; Qwen2 ``use_sliding_window`` with its second layer
sliding; Gemma 2 with ``sliding_window=6``, its layers alternating; ModernBERT with
``local_attention=8``, ``|i - j| <= 4``), with eager and SDPA attention, each exported with
both exporters, optimized, and compared with the original at 4, 8 and 16 tokens (below and
above the window), batch 1 and 2, right padding.

The variants run interleaved (one run of each per round, the order rotated every round)
after one warm-up run each; the figure is the median of ``--runs`` rounds, and the table
shows speed = original time / variant time. Outputs are compared with the original's
(max relative error). Files go to benchmarks/_work/sliding_window/ (gitignored).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "_work" / "sliding_window"
CONFIG = {"hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 4,
          "intermediate_size": 2048, "vocab_size": 8192}
VARIANTS = ("original", "ort-opt", "onnxscript", "onnxopt", "onnxopt-noband")


def export(path: Path, exporter: str, layers: int, window: int, max_pos: int) -> None:
    """The Mistral, exported with models/export.py's exporters (dims ``batch`` x ``seq``)."""
    import onnx
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    sys.path.insert(0, str(ROOT / "models"))
    import export as models_export

    def build(attn: str):
        cfg = MistralConfig(**CONFIG, num_hidden_layers=layers, max_position_embeddings=max_pos,
                            sliding_window=window, use_cache=False, tie_word_embeddings=False)
        cfg._attn_implementation = attn
        return MistralForCausalLM(cfg)

    spec = models_export.Spec("mistral_bench", build, "MistralForCausalLM", "sdpa", "text",
                              "logits", True)
    torch.manual_seed(0)
    model = models_export.build(spec)
    fn = models_export.export_ts if exporter == "ts" else models_export.export_dynamo
    proto = fn(spec, model)
    onnx.save_model(proto, str(path), save_as_external_data=False)


def ort_optimizer(src: Path, dst: Path) -> str:
    from onnxruntime.transformers.optimizer import optimize_model

    for model_type in ("gpt2", "bert"):
        try:
            opt = optimize_model(str(src), model_type=model_type,
                                 num_heads=CONFIG["num_attention_heads"],
                                 hidden_size=CONFIG["hidden_size"], use_gpu=False)
        except Exception as e:  # noqa: BLE001 - report and fall back
            print(f"  ort optimizer ({model_type}) failed: {type(e).__name__}: {e}", flush=True)
            continue
        opt.save_model_to_file(str(dst))
        fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
        return f"{model_type}: {fused}"
    return "failed"


def onnxscript_rewriter(src: Path, dst: Path) -> str:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model, counts = optimize_for_ort(ir.load(str(src)))
    ir.save(model, str(dst))
    return str({k: v for k, v in counts.items() if v})


def onnxopt(src: Path, dst: Path) -> str:
    report = dst.with_suffix(".json")
    subprocess.run([sys.executable, "-m", "onnxopt", "optimize", str(src), "-o", str(dst),
                    "--target", "cpu", "-q", "--json", str(report)], check=True, cwd=ROOT)
    data = json.loads(report.read_text())
    return str((data.get("select") or {}).get("chosen", {}))


def onnxopt_without_band_skip(src: Path, dst: Path) -> str:
    """onnxopt's output with the query blocks of the causal mask: every key up to the block's
    last row (the band's keys before the window are read, and masked)."""
    import onnx

    from onnxopt.options import OptimizeOptions
    from onnxopt.pipeline import run_pipeline
    from onnxopt.select import causal_blocks

    saved = causal_blocks._block_keys

    def every_key(b, body, attrs, start, end, offset, zero):
        return zero, body.op("Add", end, offset)

    causal_blocks._block_keys = every_key
    try:
        result = run_pipeline(onnx.load(str(src)), OptimizeOptions(target="cpu"))
    finally:
        causal_blocks._block_keys = saved
    onnx.save_model(result.proto, str(dst))
    return str(result.report.stages["select"].chosen_counts())


def session(path: Path):
    return _session_of(str(path))


def _session_of(model):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


CORE = """<ir_version: 8, opset_import: ["": 18, "ai.onnxopt": 1]>
g (float[B,8,S,64] q, float[B,8,S,64] k, float[B,8,S,64] v, float[B,1,S,S] m, int64[B,S] am)
    => (float[B,8,S,64] o) {{
  o = ai.onnxopt.AttentionFused <num_heads=8, kv_num_heads=8, scale=0.125, head_size=64,
        causal=1, mask_kind="causal+key_padding+window", window={window}> (q, k, v, m, am)
}}"""


def core_session(window: int, kernel_name: str, block_rows: int | None = None,
                 band: bool = True):
    """One node bound to ``kernel_name``; ``block_rows`` overrides the band's block size,
    ``band=False`` reads every key up to each block's last row."""
    import onnx.parser

    from onnxopt import select
    from onnxopt.exporter import export_model
    from onnxopt.importer import import_model
    from onnxopt.legality.target import run_target
    from onnxopt.options import OptimizeOptions
    from onnxopt.select import causal_blocks as cb
    from onnxopt.select.registry import default_registry

    kernel = next(k for k in default_registry() if k.name == kernel_name)
    saved = cb._block_keys, cb.i64, cb.MAX_BAND_BLOCKS

    def every_key(b, body, attrs, start, end, offset, zero):
        return zero, body.op("Add", end, offset)

    def rows_i64(b, values, name):
        return saved[1](b, [block_rows] if name == "band_block_rows" else values, name)

    if not band:
        cb._block_keys = every_key
    if block_rows:
        cb.i64, cb.MAX_BAND_BLOCKS = rows_i64, 1 << 20
    try:
        model = import_model(onnx.parser.parse_model(CORE.format(window=window)))
        options = OptimizeOptions(target="cpu")
        select.run(model, options, run_target(options, model.opset), registry=[kernel])
        proto = export_model(model)
    finally:
        cb._block_keys, cb.i64, cb.MAX_BAND_BLOCKS = saved
    return _session_of(proto.SerializeToString())


def core(seq: int, window: int, runs: int) -> None:
    from onnxopt.select.causal_blocks import MAX_BAND_BLOCKS, MIN_BAND_BLOCK_ROWS

    w = window - 1  # the fused op's window: keys before the query
    blocks = "decompose.AttentionFused.causal_blocks"
    chosen = max(w // 4, MIN_BAND_BLOCK_ROWS)
    variants = {"whole rows": core_session(w, "decompose.AttentionFused"),
                "causal blocks (every key)": core_session(w, blocks, band=False)}
    for rows in sorted({w, w // 2, w // 4, w // 8, chosen}, reverse=True):
        if rows >= 8:
            mark = " (onnxopt)" if rows == chosen and seq // rows <= MAX_BAND_BLOCKS else ""
            variants[f"band, {rows}-row blocks{mark}"] = core_session(w, blocks, rows)
    rng = np.random.default_rng(0)
    i, j = np.arange(seq)[:, None], np.arange(seq)[None]
    feeds = {n: rng.standard_normal((1, 8, seq, 64)).astype(np.float32) for n in "qkv"}
    feeds["m"] = np.where((j > i) | (j < i - w), np.finfo(np.float32).min,
                          0).astype(np.float32)[None, None]
    feeds["am"] = np.ones((1, seq), np.int64)
    _timed(variants, feeds, runs, f"one AttentionFused node: batch 1, seq {seq}, window "
           f"{window}, 8 heads of 64", "whole rows")


def _timed(sessions: dict, feeds: dict, runs: int, title: str, base: str) -> None:
    names = list(sessions)
    outputs = {v: sessions[v].run(None, feeds)[0] for v in names}  # the warm-up run
    times: dict[str, list[float]] = {v: [] for v in names}
    for r in range(runs):
        for v in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            sessions[v].run(None, feeds)
            times[v].append(time.perf_counter() - start)
    want = outputs[base]
    median = {v: statistics.median(times[v]) for v in names}
    print(f"\n{title}; {runs} interleaved rounds, {platform.machine()}, "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}")
    print(f"| variant | median ms | speed vs {base} | max rel err |")
    print("|---|---:|---:|---:|")
    for v in names:
        err = float(np.abs(outputs[v] - want).max() / np.abs(want).max())
        print(f"| {v} | {median[v] * 1e3:.0f} | {median[base] / median[v]:.2f}x | {err:.1e} |")


def _family_models():
    """name -> (builder(attn), output) of the small band models ``--families`` exports."""
    sys.path.insert(0, str(ROOT / "models"))
    import export as E

    def qwen2(attn):
        from transformers import Qwen2Config, Qwen2ForCausalLM

        cfg = Qwen2Config(vocab_size=E.VOCAB, hidden_size=E.HIDDEN, num_hidden_layers=2,
                          num_attention_heads=E.HEADS, num_key_value_heads=E.KV_HEADS,
                          intermediate_size=E.INTERMEDIATE, max_position_embeddings=E.MAX_POS,
                          use_sliding_window=True, sliding_window=6, max_window_layers=1,
                          use_cache=False, tie_word_embeddings=False)
        cfg._attn_implementation = attn
        return Qwen2ForCausalLM(cfg)

    def gemma2(attn):
        from transformers import Gemma2Config, Gemma2ForCausalLM

        cfg = Gemma2Config(vocab_size=E.VOCAB, hidden_size=E.HIDDEN, num_hidden_layers=2,
                           num_attention_heads=E.HEADS, num_key_value_heads=1, head_dim=16,
                           intermediate_size=E.INTERMEDIATE, max_position_embeddings=E.MAX_POS,
                           sliding_window=6, use_cache=False)
        cfg._attn_implementation = attn
        return Gemma2ForCausalLM(cfg)

    def modernbert(attn):
        from transformers import ModernBertConfig, ModernBertModel

        cfg = ModernBertConfig(vocab_size=E.VOCAB, hidden_size=E.HIDDEN, num_hidden_layers=3,
                               num_attention_heads=E.HEADS, intermediate_size=E.INTERMEDIATE,
                               max_position_embeddings=E.MAX_POS, local_attention=8,
                               pad_token_id=0)
        cfg._attn_implementation = attn
        return ModernBertModel(cfg)

    return E, {"mistral": (E._mistral_sliding, "logits"), "qwen2": (qwen2, "logits"),
               "gemma2": (gemma2, "logits"), "modernbert": (modernbert, "last_hidden_state")}


def families() -> None:
    import torch

    from onnxopt.options import OptimizeOptions
    from onnxopt.pipeline import run_pipeline

    E, models = _family_models()
    print("| family | attention | exporter | fused | masks proved | max rel err |")
    print("|---|---|---|---|---|---|")
    for name, (build, output) in models.items():
        for attn in ("eager", "sdpa"):
            for tag, export_fn in (("ts", E.export_ts), ("dynamo", E.export_dynamo)):
                row = f"| {name} | {attn} | {tag} |"
                try:
                    spec = E.Spec(name, build, name, attn, "text", output, True)
                    torch.manual_seed(0)
                    model = E.build(spec)
                    proto = export_fn(spec, model)
                except Exception as e:  # noqa: BLE001 - a family that does not export
                    print(f"{row} does not export: {str(e).splitlines()[0][:90]} | | |")
                    continue
                result = run_pipeline(proto, OptimizeOptions(target="cpu"))
                regions = [r for r in result.report.stages["fuse"].regions
                           if r.rule == "attention"]
                kinds = [r.detail.split("mask ")[-1] if r.status == "fused" else r.code
                         for r in regions]
                a, b = (_session_of(p.SerializeToString()) for p in (proto, result.proto))
                worst = 0.0
                for seq in (4, 8, 16):
                    for batch in (1, 2):
                        f = {k: v.numpy() for k, v in
                             E.make_inputs(spec, batch, seq, pad=True).items()}
                        x, y = a.run(None, f)[0], b.run(None, f)[0]
                        worst = max(worst, float(np.abs(x - y).max() / np.abs(x).max()))
                fused = sum(r.status == "fused" for r in regions)
                print(f"{row} {fused}/{len(regions)} | {'; '.join(kinds)} | {worst:.1e} |",
                      flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--exporter", choices=["ts", "dynamo"], default="dynamo")
    ap.add_argument("--core", action="store_true", help="one attention node, block sizes")
    ap.add_argument("--families", action="store_true", help="coverage of 4 band families")
    args = ap.parse_args(argv)
    if args.families:
        families()
        return 0
    if args.core:
        core(args.seq, args.window, args.runs)
        return 0

    WORK.mkdir(parents=True, exist_ok=True)
    tag = f"mistral_w{args.window}_l{args.layers}.{args.exporter}"
    files = {v: WORK / (f"{tag}.onnx" if v == "original" else f"{tag}.{v}.onnx")
             for v in VARIANTS}
    if not files["original"].exists():
        export(files["original"], args.exporter, args.layers, args.window,
               max(4096, 2 * args.seq))
    makers = {"ort-opt": ort_optimizer, "onnxscript": onnxscript_rewriter, "onnxopt": onnxopt,
              "onnxopt-noband": onnxopt_without_band_skip}
    for variant, make in makers.items():
        start = time.perf_counter()
        try:
            note = make(files["original"], files[variant])
        except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not timed
            note = f"failed: {type(e).__name__}: {str(e)[:200]}"
            files[variant].unlink(missing_ok=True)
        print(f"  {variant}: {time.perf_counter() - start:.1f} s, {note}", flush=True)

    names = [v for v in VARIANTS if files[v].exists()]
    sessions = {v: session(files[v]) for v in names}
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(2, CONFIG["vocab_size"], (1, args.seq), dtype=np.int64),
             "attention_mask": np.ones((1, args.seq), np.int64)}
    _timed(sessions, feeds, args.runs, f"{tag}: batch 1, seq {args.seq}, window {args.window}",
           "original")
    return 0


if __name__ == "__main__":
    sys.exit(main())
