"""Time two whole commands side by side: A B A B …, wall seconds and peak memory of each run.

    python benchmarks/paired_command.py -n 11 \\
        --a "python -P -m onnxopt optimize M.onnx -o /tmp/a.onnx --target cpu -q" \\
        --b "env PYTHONPATH=/path/to/baseline python -P -m onnxopt optimize M.onnx -o /tmp/b.onnx --target cpu -q"

``-P``: without it, ``python -m`` puts the current folder first on the import path, ahead of
``PYTHONPATH``, so from a checkout's root both commands would import that checkout.

Why: these machines are shared, and their speed drifts from minute to minute by more than
most of the differences worth measuring. Runs taken in turn see the same drift, so the ratio
of each pair (A over the B run beside it) holds where a comparison of two separate series
would not. It prints the minimum, median and maximum of A, of B and of the pair ratios, and
each command's peak resident memory (from the kernel's own accounting of the finished
process, ``wait4``). One warm-up run of each is not counted (page cache, bytecode).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time


def run_once(argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak resident MiB, exit status) of one run, its output discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def summary(values: list[float]) -> str:
    return (f"min {min(values):.3f}  median {statistics.median(values):.3f}  "
            f"max {max(values):.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=11, help="counted runs of each command")
    ap.add_argument("--a", required=True, help="command A, split as a shell splits words")
    ap.add_argument("--b", required=True, help="command B, the same way")
    args = ap.parse_args(argv)
    a, b = shlex.split(args.a), shlex.split(args.b)
    run_once(a)
    run_once(b)
    walls: dict[str, list[float]] = {"A": [], "B": []}
    peaks: dict[str, list[float]] = {"A": [], "B": []}
    codes: set[tuple[str, int]] = set()
    for _ in range(args.n):
        for name, cmd in (("A", a), ("B", b)):
            wall, peak, code = run_once(cmd)
            walls[name].append(wall)
            peaks[name].append(peak)
            codes.add((name, code))
    for name in ("A", "B"):
        print(f"{name} wall s     {summary(walls[name])}")
        print(f"{name} peak MiB   {summary(peaks[name])}")
    ratios = [x / y for x, y in zip(walls["A"], walls["B"])]
    print(f"A/B wall       {summary(ratios)}")
    print(f"exit codes: {sorted(codes)}")
    return 0 if all(code == 0 for _, code in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
