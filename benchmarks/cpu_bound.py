"""How fast can the CPU speed benchmark's models get at all? A bound from ORT's profiler.

    python benchmarks/cpu_speed.py            # first: builds benchmarks/_work/cpu_speed/
    python benchmarks/cpu_bound.py            # then: profiles the original and onnxopt files
    python benchmarks/cpu_bound.py --models gpt2 --shapes 1x512 --runs 5

For each model and shape of ``benchmarks/cpu_speed.py`` (same files, same settings: CPU
provider, 1 intra-op thread, ``allow_spinning`` off), ONNX Runtime's profiler gives every
kernel's time. GEMM kernels (MatMul, Gemm, FusedMatMul, FusedGemm) run at the core's
peak in MLAS already; the rest is what graph rewriting can shrink. Two bounds on the speed
over the original (original time / best conceivable time):

- ``all-else-free``: every non-GEMM kernel costs nothing and the GEMMs are onnxopt's
  (causal blocks do fewer multiplications at long sequences);
- ``essential``: only Softmax, the norms, the activations and the embedding Gather stay, at
  the cost onnxopt's output pays for them (these compute the model; no rewrite removes them).

Kernel times inside ``If`` branches are counted once (the If's own span is left out).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "_work" / "cpu_speed"
GEMM = {"MatMul", "Gemm", "FusedMatMul", "FusedGemm"}
CONTROL = {"If", "Loop", "Scan"}
ESSENTIAL = {"Softmax", "LayerNormalization", "SimplifiedLayerNormalization", "FastGelu",
             "BiasGelu", "Gelu", "QuickGelu", "Erf", "Tanh", "Sigmoid", "Gather"}


def feeds(session, batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for i in session.get_inputs():
        if "mask" in i.name:
            out[i.name] = np.ones((batch, seq), np.int64)
        elif "position" in i.name:
            out[i.name] = np.tile(np.arange(seq), (batch, 1)).astype(np.int64)
        elif "type" in i.name:
            out[i.name] = np.zeros((batch, seq), np.int64)
        else:
            out[i.name] = rng.integers(0, 8000, (batch, seq)).astype(np.int64)
    return out


def profile(path: Path, batch: int, seq: int, runs: int, warmup: int) -> Counter:
    """Milliseconds per run by op type (kernel time, control-flow spans left out)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    with tempfile.TemporaryDirectory() as tmp:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "p")
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        f = feeds(sess, batch, seq)
        for _ in range(warmup + runs):  # the profiler cannot start late: warm-up runs count too
            sess.run(None, f)
        events = _events(sess.end_profiling())
    per_op: Counter = Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"]["op_name"]
            if op not in CONTROL:
                per_op[op] += e["dur"] / 1000.0
    total_runs = runs + warmup
    return Counter({op: t / total_runs for op, t in per_op.items()})


def _events(path: str) -> list[dict]:
    with open(path) as fh:
        data = json.load(fh)
    os.remove(path)
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt2,bert,llama")
    ap.add_argument("--exporters", default="ts,dynamo")
    ap.add_argument("--shapes", default="1x128,1x512,8x128")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)
    start = time.time()
    print("| model | shape | original ms | GEMM share | onnxopt GEMM ms | essential ms "
          "| bound: all else free | bound: essential only |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    logs_free, logs_essential = [], []
    for name in args.models.split(","):
        for exporter in args.exporters.split(","):
            base = WORK / f"{name}.{exporter}.onnx"
            optimized = WORK / f"{name}.{exporter}.onnxopt.onnx"
            if not base.exists() or not optimized.exists():
                print(f"missing {base} or {optimized}: run benchmarks/cpu_speed.py first",
                      file=sys.stderr)
                return 2
            for shape in args.shapes.split(","):
                batch, seq = (int(x) for x in shape.split("x"))
                orig = profile(base, batch, seq, args.runs, args.warmup)
                opt = profile(optimized, batch, seq, args.runs, args.warmup)
                total = sum(orig.values())
                gemm_orig = sum(t for op, t in orig.items() if op in GEMM)
                gemm = sum(t for op, t in opt.items() if op in GEMM)
                essential = sum(t for op, t in opt.items() if op in ESSENTIAL)
                free, ess = total / gemm, total / (gemm + essential)
                logs_free.append(math.log(free))
                logs_essential.append(math.log(ess))
                print(f"| {name}.{exporter} | {shape} | {total:.1f} | {gemm_orig / total:.1%} "
                      f"| {gemm:.1f} | {essential:.1f} | {free:.3f} | {ess:.3f} |", flush=True)
    gm = [math.exp(sum(v) / len(v)) for v in (logs_free, logs_essential)]
    print(f"| **geometric mean** | | | | | | **{gm[0]:.3f}** | **{gm[1]:.3f}** |")
    print(f"\n{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}; "
          f"{os.cpu_count()} cores; {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
