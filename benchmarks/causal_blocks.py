"""Causal attention in query blocks against the whole-row decomposition, attention core alone.

    python benchmarks/causal_blocks.py
    python benchmarks/causal_blocks.py --shapes 1x512,1x2048 --runs 10

One ``AttentionFused`` node (8 heads of 64, a causal float-minimum mask plus key padding,
all keys kept) bound to ``decompose.AttentionFused.causal_blocks`` with its default tiers,
with 4 blocks only, and to the plain decomposition; ONNX Runtime, CPU provider, 1 intra-op
thread, ``allow_spinning`` off; the variants interleaved, median of ``--runs`` after one
warm-up run each. The outputs are compared (max abs difference).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

TEXT = """<ir_version: 8, opset_import: ["": 18, "ai.onnxopt": 1]>
g (float[B,8,S,64] q, float[B,8,S,64] k, float[B,8,S,64] v, float[B,1,S,S] m, int64[B,S] am)
    => (float[B,8,S,64] o) {
  o = ai.onnxopt.AttentionFused <num_heads=8, kv_num_heads=8, scale=0.125, head_size=64,
        causal=1, mask_kind="causal+key_padding"> (q, k, v, m, am)
}"""


def bound_session(kernel_name: str, tiers=None):
    import onnx.parser
    import onnxruntime as ort

    from onnxopt import select
    from onnxopt.exporter import export_model
    from onnxopt.importer import import_model
    from onnxopt.legality.target import run_target
    from onnxopt.options import OptimizeOptions
    from onnxopt.select import causal_blocks
    from onnxopt.select.registry import default_registry

    kernel = next(k for k in default_registry() if k.name == kernel_name)
    saved = causal_blocks.TIERS
    causal_blocks.TIERS = tiers or saved
    try:
        model = import_model(onnx.parser.parse_model(TEXT))
        options = OptimizeOptions(target="cpu")
        select.run(model, options, run_target(options, model.opset), registry=[kernel])
        proto = export_model(model)
    finally:
        causal_blocks.TIERS = saved
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1x128,1x512,8x128,1x768,1x1024,1x2048")
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args(argv)
    from onnxopt.select.causal_blocks import TIERS

    variants = {
        "decomposition": bound_session("decompose.AttentionFused"),
        "4 blocks": bound_session("decompose.AttentionFused.causal_blocks", ((TIERS[0][0], 4),)),
        "tiers": bound_session("decompose.AttentionFused.causal_blocks"),
    }
    names = list(variants)
    print(f"tiers {TIERS}")
    print("| shape | " + " | ".join(f"{n} ms" for n in names)
          + " | 4 blocks speed | tiers speed | max abs diff |")
    print("|---|" + "---:|" * (len(names) + 3))
    rng = np.random.default_rng(0)
    start = time.time()
    for shape in args.shapes.split(","):
        b, s = (int(x) for x in shape.split("x"))
        hidden = np.triu(np.ones((s, s), bool), 1)[None, None]
        feeds = {n: rng.standard_normal((b, 8, s, 64)).astype(np.float32) for n in "qkv"}
        feeds["m"] = np.broadcast_to(np.where(hidden, np.finfo(np.float32).min, 0),
                                     (b, 1, s, s)).astype(np.float32)
        feeds["am"] = np.ones((b, s), np.int64)
        outs = {n: variants[n].run(None, feeds)[0] for n in names}
        diff = max(float(np.abs(outs[n] - outs[names[0]]).max()) for n in names)
        times: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.runs):
            for n in names[r % len(names):] + names[:r % len(names)]:
                t = time.perf_counter()
                variants[n].run(None, feeds)
                times[n].append(time.perf_counter() - t)
        med = {n: statistics.median(t) * 1000 for n, t in times.items()}
        base = med["decomposition"]
        print(f"| {shape} | " + " | ".join(f"{med[n]:.3f}" for n in names)
              + f" | {base / med['4 blocks']:.2f}x | {base / med['tiers']:.2f}x | {diff:.1e} |",
              flush=True)
    print(f"\n{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}; {os.cpu_count()} cores; "
          f"{time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
