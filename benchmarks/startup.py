"""What starting onnxopt costs before it reads a model: the interpreter and its imports.

    python benchmarks/startup.py [-n 11] [--top 12]

Why: every command pays this, and most of it is other packages' code. A dependency's new
release can add more than the whole pipeline costs (ml_dtypes 0.7.0 took 0.65-0.9 s to
import, against 0.03 s for 0.6.0; onnx imports it on every start). The pipeline's own
benchmarks time a whole command and would only show it as a slower minute.

It times ``python -P -m onnxopt --help`` in fresh processes (wall seconds: min, median, max),
then runs it once under ``-X importtime`` and prints the slowest imports by their own time
(a package's time without the packages it imports), and the versions of the dependencies
that onnx and onnxopt import at start. Run it after a fresh install, beside the numbers of
``optimizer_speed.py`` and ``paired_command.py``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import subprocess
import sys
import time

COMMAND = [sys.executable, "-P", "-m", "onnxopt", "--help"]
# The packages imported when onnxopt starts (onnxruntime is loaded by the ORT helper, in a
# process of its own: onnxopt/ort_helper.py).
DEPENDENCIES = ("onnx", "ml_dtypes", "numpy", "protobuf", "click", "rich", "onnxruntime-gpu",
                "onnxruntime")


def wall_seconds(runs: int) -> list[float]:
    """Wall seconds of ``runs`` starts, each in a fresh process (one warm-up not counted)."""
    env = _env()
    subprocess.run(COMMAND, stdout=subprocess.DEVNULL, env=env, check=True)
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(COMMAND, stdout=subprocess.DEVNULL, env=env, check=True)
        out.append(time.perf_counter() - start)
    return out


def slowest_imports(top: int) -> list[tuple[int, int, str]]:
    """(own µs, cumulative µs, module) of the ``top`` slowest imports of one start."""
    done = subprocess.run([sys.executable, "-X", "importtime", *COMMAND[1:]],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=_env(), check=True)
    return sorted(_parse_importtime(done.stderr), reverse=True)[:top]


def _parse_importtime(text: str) -> list[tuple[int, int, str]]:
    rows = []
    for line in text.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = line[len("import time:"):].split("|", 2)
        rows.append((int(own), int(cumulative), name.strip()))
    return rows


def _env() -> dict[str, str]:
    """The environment without ``PYTHONDONTWRITEBYTECODE``: an installed package has its
    bytecode, and without it every timed start would compile onnxopt's sources again."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def versions() -> dict[str, str]:
    out = {}
    for name in DEPENDENCIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=11, help="timed starts")
    ap.add_argument("--top", type=int, default=12, help="slowest imports listed")
    args = ap.parse_args(argv)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    walls = wall_seconds(args.n)
    print(f"`onnxopt --help`, {args.n} starts: min {min(walls):.3f} s  "
          f"median {statistics.median(walls):.3f} s  max {max(walls):.3f} s")
    print("slowest imports of one start (own ms, cumulative ms):")
    for own, cumulative, name in slowest_imports(args.top):
        print(f"  {own / 1000:8.1f} {cumulative / 1000:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
