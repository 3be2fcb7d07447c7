"""ONNX's node tests through onnxopt: every case optimized, run in ORT, and classified.

    python benchmarks/node_suite.py --all                 # every case (~1,900)
    python benchmarks/node_suite.py                       # the CI slice only
    python benchmarks/node_suite.py --all --json OUT.json
    python benchmarks/node_suite.py --only test_gelu      # cases whose name contains a string

CI runs a fixed slice of these cases (``tests/conformance/test_node_suite.py``); this script
runs all of them and records the figures: the count per class (see
``tests/conformance/node_cases.py``) and every case that is neither ``ok`` nor
``not_runnable``, with why. The goal is 0 refused, 0 crash, 0 noload, 0 norun, 0 changed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "conformance"))

import node_cases
from node_cases import CLASSES, CaseResult, NodeCase


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every case, not only the CI slice")
    parser.add_argument("--only", default="", help="cases whose name contains this string")
    parser.add_argument("--json", type=Path, help="write counts and every result here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each case as it runs")
    return parser.parse_args(argv)


def select(args: argparse.Namespace) -> list[NodeCase]:
    cases = list(node_cases.collect_cases()) if args.all else node_cases.ci_slice()
    return [c for c in cases if args.only in c.name]


def run_all(cases: list[NodeCase], verbose: bool) -> list[CaseResult]:
    results = []
    for case in cases:
        result = node_cases.classify(case)
        if verbose:
            print(f"{result.status:12} {case.name} {result.detail}", flush=True)
        results.append(result)
    return results


def report(results: list[CaseResult], seconds: float) -> dict:
    counts = Counter(r.status for r in results)
    runnable = [r for r in results if r.status != "not_runnable"]
    summary = {
        "cases": len(results),
        "runnable": len(runnable),
        "counts": {c: counts.get(c, 0) for c in CLASSES},
        "ort_differs_from_expected": sorted(r.name for r in runnable
                                            if r.ort_matches_expected is False),
        "seconds": round(seconds, 1),
    }
    print(f"{len(results)} cases, {len(runnable)} runnable in ORT CPU, {seconds:.1f} s")
    print("  " + "  ".join(f"{c}={n}" for c, n in summary["counts"].items()))
    print(f"  ORT's original differs from the expected outputs on "
          f"{len(summary['ort_differs_from_expected'])} runnable cases (informational)")
    print_failures([r for r in runnable if r.status != "ok"])
    return summary


def print_failures(failures: list[CaseResult]) -> None:
    """Non-ok cases grouped by class and identical detail."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in failures:
        groups[(r.status, r.detail)].append(r.name)
    for (status, detail), names in sorted(groups.items()):
        print(f"\n{status}: {detail}")
        for name in names:
            print(f"    {name}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    cases = select(args)
    results = run_all(cases, args.verbose)
    summary = report(results, time.perf_counter() - start)
    if args.json:
        summary["results"] = [r.as_dict() for r in results]
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    bad = sum(n for c, n in summary["counts"].items() if c not in ("ok", "not_runnable"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
