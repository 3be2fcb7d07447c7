"""Peak memory of ``onnxopt verify`` on a model with over 1 GB of external data.

verify ran both models' sessions at once, in one child of the ORT helper: on a
LLaMA-7B-shaped float16 model (13.5 GB of weights) it was killed for memory. It now runs one
model at a time. This script builds a model of a few large MatMul weights (external data, in
a temporary folder it deletes afterwards), optimizes it, then runs ``onnxopt verify`` on the
pair while it samples every process of the command's tree (/proc, every 20 ms): the peak of
their summed RSS, of their summed anonymous RSS (what is not a mapped file's pages, which the
kernel can drop), and of the largest single process.

    python benchmarks/verify_memory.py [--gib 1.0] [--checkout PATH ...]

Each ``--checkout`` is run in turn (PYTHONPATH=PATH): compare two trees on the same model.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 8192


def build_model(folder: str, gib: float) -> str:
    """``x[batch, seq, HIDDEN]`` through as many ``HIDDEN x HIDDEN`` float32 MatMuls (with a
    Relu between) as make ``gib`` GiB, their weights in ``model.data``."""
    per_weight = HIDDEN * HIDDEN * 4
    count = max(1, int(np.ceil(gib * 2**30 / per_weight)))
    rng = np.random.default_rng(0)
    nodes, weights, last = [], [], "x"
    for i in range(count):
        w = rng.standard_normal((HIDDEN, HIDDEN), dtype=np.float32) * np.float32(HIDDEN ** -0.5)
        weights.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [last, f"w{i}"], [f"m{i}"]))
        last = f"m{i}"
        if i < count - 1:
            nodes.append(helper.make_node("Relu", [last], [f"r{i}"]))
            last = f"r{i}"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                     ["batch", "seq", HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", HIDDEN])],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    path = os.path.join(folder, "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, location="model.data",
                    size_threshold=1024)
    return path


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(name))
    out, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        out.append(pid)
        frontier.extend(children.get(pid, []))
    return out


def _rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, RssAnon) of ``pid`` in KiB; zeros once it is gone."""
    rss = anon = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
    except OSError:
        pass
    return rss, anon


def measure(argv: list[str], env: dict[str, str], cwd: str) -> dict:
    """Run ``argv``; the peaks of its process tree's summed RSS, summed anonymous RSS and
    largest single RSS (MiB), the exit code and the wall time."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    peak_sum = peak_anon = peak_one = most_processes = 0
    while proc.poll() is None:
        pids = _tree(proc.pid)
        sizes = [_rss_kib(p) for p in pids]
        peak_sum = max(peak_sum, sum(r for r, _ in sizes))
        peak_anon = max(peak_anon, sum(a for _, a in sizes))
        peak_one = max(peak_one, max((r for r, _ in sizes), default=0))
        most_processes = max(most_processes, sum(1 for r, _ in sizes if r))
        time.sleep(0.02)
    output = proc.stdout.read().decode(errors="replace")
    return {"rc": proc.returncode, "wall_s": round(time.perf_counter() - start, 1),
            "peak_tree_rss_mib": peak_sum // 1024, "peak_tree_anon_mib": peak_anon // 1024,
            "peak_process_rss_mib": peak_one // 1024, "most_processes": most_processes,
            "tail": output.strip().splitlines()[-3:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="external data size (GiB)")
    parser.add_argument("--checkout", action="append", default=None,
                        help="onnxopt tree to run (PYTHONPATH); default: this one")
    args = parser.parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkouts = [os.path.abspath(c) for c in args.checkout or [here]]
    folder = tempfile.mkdtemp(prefix="onnxopt-verify-memory-")
    try:
        model = build_model(folder, args.gib)
        data = os.path.getsize(os.path.join(folder, "model.data")) / 2**30
        optimized = os.path.join(folder, "model.opt.onnx")
        env = dict(os.environ, PYTHONPATH=checkouts[0])
        subprocess.run([sys.executable, "-m", "onnxopt", "optimize", model, "-o", optimized,
                        "-q"], env=env, cwd=folder, check=True)
        print(f"model: {data:.2f} GiB of external data ({folder})")
        for checkout in checkouts:
            env = dict(os.environ, PYTHONPATH=checkout)
            # run from the model's folder: ``-m`` puts the working folder before PYTHONPATH
            result = measure([sys.executable, "-m", "onnxopt", "verify", model, optimized],
                             env, folder)
            print(f"{checkout}: {result}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
