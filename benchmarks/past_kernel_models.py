"""Whole decode steps with ``ort.MultiHeadAttention.past`` against the same optimization
without it, side by side, interleaved (decoder-with-past exports of ``decode_speed.py``).

Each model is optimized twice with the same ``--workload`` (a decode step, so that selection
ranks the kernels at it): by this checkout (``mha_past``: the cache Concat taken over by ORT's
MultiHeadAttention with past/present) and by ``--baseline`` (a checkout without the kernel,
``decomposition``); both are timed with the original by ``decode_speed.time_model`` (rounds
interleaved, order rotated, ``--trials`` passes with fresh sessions; a figure is the median of
the passes' medians of original time / variant time per round).

    python benchmarks/past_kernel_models.py --baseline /work/main [--models gpt2.ts]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from decode_speed import CELLS, WORK, time_model

# cell -> the workload that ranks kernels at it
WORKLOADS = {"decode_b1_p127": "decode:batch=1,past=127",
             "decode_b1_p1023": "decode:batch=1,past=1023",
             "decode_b4_p511": "decode:batch=4,past=511"}


def optimize(src: Path, dst: Path, checkout: Path, workload: str) -> dict:
    report = dst.with_suffix(".json")
    subprocess.run([sys.executable, "-m", "onnxopt", "optimize", str(src), "-o", str(dst),
                    "--target", "cpu", "-q", "--workload", workload, "--json", str(report)],
                   check=True, cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)})
    return json.loads(report.read_text())["select"]["chosen"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--models", default="gpt2.ts")
    ap.add_argument("--cells", default=",".join(WORKLOADS))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    out = WORK / "past_kernel"
    out.mkdir(parents=True, exist_ok=True)
    for name in args.models.split(","):
        src = WORK / f"{name}.onnx"
        for cell in args.cells.split(","):
            files = {"original": src}
            for variant, checkout in (("mha_past", ROOT), ("decomposition", args.baseline)):
                dst = out / f"{name}.{cell}.{variant}.onnx"
                chosen = optimize(src, dst, checkout, WORKLOADS[cell])
                attention = {k: n for k, n in chosen.items() if "Attention" in k}
                print(f"  {name} {cell} {variant}: {attention}", flush=True)
                files[variant] = dst
            result = time_model(files, [cell], args.runs, args.warmup, args.trials)[cell]
            ms, speed = result["ms"], result["speed"]
            ratio = [d / m for d, m in zip(result["passes_ms"]["decomposition"],
                                           result["passes_ms"]["mha_past"])]
            print(f"{name} {cell} {CELLS[cell]}: original {ms['original']:.3f} ms, "
                  f"decomposition {ms['decomposition']:.3f} ms ({speed['decomposition']:.3f}x),"
                  f" mha_past {ms['mha_past']:.3f} ms ({speed['mha_past']:.3f}x); "
                  f"decomposition/mha_past per pass {' '.join(f'{x:.3f}' for x in ratio)}; "
                  f"max rel err {result['rel_err']['mha_past']:.1e}", flush=True)
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
