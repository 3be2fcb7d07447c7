"""Node counts of every optimized `models/` file, for both targets, against another checkout.

    python benchmarks/node_counts.py [--baseline /path/to/older/checkout]

A rewrite that changes what the output holds (a normal form, a layout decision) is measured
here: the total, and every file whose count differs from the baseline's. The baseline runs
in its own process (``PYTHONPATH`` set to that checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def counts() -> dict[str, int]:
    from onnxopt.options import OptimizeOptions
    from onnxopt.pipeline import run_pipeline

    out = {}
    for target in ("cpu", "cuda"):
        for path in sorted((ROOT / "models").glob("*.onnx")):
            result = run_pipeline(str(path), OptimizeOptions(target=target))
            out[f"{target}:{path.name}"] = len(result.proto.graph.node)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="an older checkout to compare with")
    ap.add_argument("--print-json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.print_json:
        print(json.dumps(counts()))
        return 0
    mine = counts()
    base = None
    if args.baseline:
        done = subprocess.run([sys.executable, __file__, "--print-json"], capture_output=True,
                              text=True, check=True, cwd=args.baseline,
                              env={**os.environ, "PYTHONPATH": str(args.baseline)})
        base = json.loads(done.stdout.strip().splitlines()[-1])
    shared = [k for k in mine if base is None or k in base]
    print(f"{len(shared)} outputs: {sum(mine[k] for k in shared):,} nodes"
          + (f" (baseline {sum(base[k] for k in shared):,})" if base else ""))
    if base:
        for k in shared:
            if mine[k] != base[k]:
                print(f"  {k}: {base[k]} -> {mine[k]}")
        print(f"  larger than the baseline: {sum(mine[k] > base[k] for k in shared)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
