"""Sliding-window attention on CPU: the original export, onnxopt and the two peers (issue 33).

    python benchmarks/sliding_window.py
    python benchmarks/sliding_window.py --seq 2048 --window 256 --runs 3 --exporter dynamo

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
  only the keys within the window).

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
VARIANTS = ("original", "ort-opt", "onnxscript", "onnxopt")


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


def session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--exporter", choices=["ts", "dynamo"], default="dynamo")
    args = ap.parse_args(argv)

    WORK.mkdir(parents=True, exist_ok=True)
    tag = f"mistral_w{args.window}_l{args.layers}.{args.exporter}"
    files = {v: WORK / (f"{tag}.onnx" if v == "original" else f"{tag}.{v}.onnx")
             for v in VARIANTS}
    if not files["original"].exists():
        export(files["original"], args.exporter, args.layers, args.window,
               max(4096, 2 * args.seq))
    makers = {"ort-opt": ort_optimizer, "onnxscript": onnxscript_rewriter, "onnxopt": onnxopt}
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
    outputs = {v: sessions[v].run(None, feeds)[0] for v in names}  # the warm-up run
    times: dict[str, list[float]] = {v: [] for v in names}
    for r in range(args.runs):
        for v in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            sessions[v].run(None, feeds)
            times[v].append(time.perf_counter() - start)
    want = outputs["original"]
    median = {v: statistics.median(times[v]) for v in names}
    print(f"\n{tag}: batch 1, seq {args.seq}, window {args.window}, {args.runs} interleaved "
          f"rounds, {platform.processor() or platform.machine()}, "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}")
    print("| variant | median ms | speed vs original | max rel err |")
    print("|---|---:|---:|---:|")
    for v in names:
        err = float(np.abs(outputs[v] - want).max() / np.abs(want).max())
        print(f"| {v} | {median[v] * 1e3:.0f} | {median['original'] / median[v]:.2f}x "
              f"| {err:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
