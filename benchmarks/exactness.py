"""Exactness on every shipped model: what non-exact rewrites fusion kept, what it refused, and
whether normalization alone computes bit for bit what the input did.

For each model of ``models/``, ``models/with_past/`` and ``models/other/``: the fusions (per rule), how many rounds
normalization and fusion took, the non-exact rewrites refused (per pass) because nothing
fused confined them, the non-exact rewrites the fused regions hold, and, with fusion off
(``rules=False``: normalization alone), whether every output is bitwise equal to the input's
on verify's inputs (ONNX Runtime running the ops as written, its graph optimizations off).

    python benchmarks/exactness.py [--markdown benchmarks/_work/exactness.md]
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import onnxopt
from onnxopt import evaluation
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.verification import compare

ROOT = Path(__file__).resolve().parent.parent


def _ops_as_written() -> None:
    plain = evaluation.session
    compare.evaluation.session = lambda *a, **k: plain(*a, **{**k, "optimize": False})


def row(path: Path, folder: Path) -> dict:
    result = run_pipeline(str(path), OptimizeOptions(target="cpu"))
    fusion = result.report.stages["fuse"]
    exactness = result.report.stages["exactness"].to_json()
    held = Counter(p for r in fusion.regions if r.status == "fused" for p in r.inexact)
    out = folder / f"{path.stem}.normalized.onnx"
    onnxopt.optimize(str(path), output=out, rules=False)
    bitwise = onnxopt.verify(path, out).bitwise
    fused = {rule: e["fused"] for rule, e in sorted(fusion.summary().items()) if e["fused"]}
    return {"model": path.name, "fused": fused, "rounds": exactness["rounds"],
            "refused": exactness["refused"], "held": dict(sorted(held.items())),
            "normalized_bitwise": bitwise}


def _cell(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", default=None, help="also write the table here")
    args = ap.parse_args()
    _ops_as_written()
    paths = [p for folder in ("", "with_past", "other")
             for p in sorted((ROOT / "models" / folder).glob("*.onnx"))]
    lines = [("| model | fused | rounds | refused (outside fusion) | held by fused regions "
             "| normalization alone bitwise |"), "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            r = row(path, Path(tmp))
            lines.append(f"| {r['model']} | {_cell(r['fused'])} | {r['rounds']} | "
                         f"{_cell(r['refused'])} | {_cell(r['held'])} | "
                         f"{'yes' if r['normalized_bitwise'] else 'NO'} |")
            print(lines[-1], flush=True)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
