"""Measure the cost model's seed: each kernel's time relative to the decomposition.

    python benchmarks/seed_cost_model.py MODEL.onnx [...] [--shapes 1x128,1x512,8x128] [--runs 15]

Runs the stages up to fusion on each model, then times every legal kernel of
each distinct fused-op signature at each shape (batch x seq) with the tuning
harness, and prints the median ratio to the decomposition per (kernel,
features) — the numbers ``cost_model.SEED`` holds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict

from onnxopt import normalize
from onnxopt.importer import import_model
from onnxopt.ir.builder import FUSED_DOMAIN
from onnxopt.legality.target import run_target
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import fuse_and_settle
from onnxopt.select import cost_model
from onnxopt.select.registry import default_registry
from onnxopt.select.selector import legal_kernels
from onnxopt.select.shapes import Binding
from onnxopt.select.tuning import measure, signature


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--shapes", default="1x128,1x512,8x128")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--target", default="cpu")
    args = ap.parse_args(argv)
    options = OptimizeOptions(target=args.target)
    registry = default_registry()
    ratios: dict[tuple, list[float]] = defaultdict(list)
    for path in args.models:
        model = import_model(path)
        normalize.run(model, options)
        target = run_target(options, model.opset)
        fuse_and_settle(model, options, target)
        seen: set[str] = set()
        for shape in args.shapes.split(","):
            batch, seq = (int(x) for x in shape.split("x"))
            binding = Binding.for_model(model, batch, seq)
            for node in [n for n in model.graph.all_nodes() if n.domain == FUSED_DOMAIN]:
                sig = signature(node, binding)
                if sig is None or sig in seen:
                    continue
                seen.add(sig)
                legal, _ = legal_kernels(node, target, registry, model_opset=model.opset)
                if len(legal) < 2:
                    continue
                times, failed = measure(model, node, legal, target, binding, runs=args.runs)
                base = times.get(f"decompose.{node.op_type}")
                if not base:
                    continue
                feats = cost_model.features(node, binding)
                line = ", ".join(f"{k} {t / base:.2f}" for k, t in sorted(times.items()))
                print(f"{path.rsplit('/', 1)[-1]} {shape} {node.op_type} {feats}: {line}"
                      + (f"; failed {failed}" if failed else ""), flush=True)
                for k, t in times.items():
                    ratios[(k, target.provider, *feats)].append(t / base)
    print("\nmedian ratio to the decomposition:")
    for key, values in sorted(ratios.items()):
        print(f"    {key!r}: {statistics.median(values):.2f},  # n={len(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
