"""How fast onnxopt itself is, against the graph size and against its peers.

    python benchmarks/optimizer_speed.py [--layers 6 12 24 48 96] [--models gpt2 bert llama]
        [--exporters ts dynamo] [--big-layers 512] [--peers [--peer-layers 6 24]]
        [--skip-export] [--repeat 3]

For every model (GPT-2, BERT and LLaMA shapes, hidden 256, 4 heads, both PyTorch
exporters, 6 to 96 layers; built in the export venv from configs with random weights)
it records, each in a fresh process:

- ``onnxopt optimize --target cpu -q --json`` as a whole command (process start
  included) and per stage (from the report), and its peak memory: the median of
  ``--repeat`` runs by stage time;
- ONNX Runtime's session creation time (default graph optimizations) for the original
  and the optimized model, ``--session-pairs`` loads of each taken in turn, and the median
  of the pairs' ratios: an optimized model must not cost more to load;
- with ``--peers``: ONNX Runtime's transformer optimizer and the onnxscript rewriter on
  the same file (export venv), where they finish within ``--peer-timeout`` seconds.

One more graph of about 100,000 nodes (a GPT-2 TorchScript export of ``--big-layers``
layers, hidden 32) checks that the cost stays proportional. Time per node is fitted
against the node count. Results go to stdout as a table and to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "_work" / "speed"
EXPORT_PYTHON = os.environ.get("ONNXOPT_EXPORT_PYTHON", "/work/venv-export/bin/python")
CONFIG = {"HIDDEN": 256, "HEADS": 4, "KV_HEADS": 2, "INTERMEDIATE": 1024, "VOCAB": 1000,
          "MAX_POS": 128}
ORT_TYPES = {"gpt2": "gpt2", "bert": "bert", "llama": "bert"}


# --------------------------------------------------------------------------- export venv stage


def stage_export(specs: list[tuple[str, str, int, int]]) -> None:
    """(export venv) Export each (name, exporter, layers, hidden) not exported yet."""
    import warnings

    import onnx

    sys.path.insert(0, str(ROOT / "models"))
    import export as ex  # models/export.py

    fns = {"ts": ex.export_ts, "dynamo": ex.export_dynamo}
    WORK.mkdir(parents=True, exist_ok=True)
    for name, tag, layers, hidden in specs:
        path = WORK / model_file(name, tag, layers, hidden)
        if path.exists():
            continue
        for key, value in CONFIG.items():
            setattr(ex, key, value)
        ex.LAYERS, ex.HIDDEN = layers, hidden
        ex.INTERMEDIATE = 4 * hidden
        model = ex.build(ex.SPECS[name])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            proto = fns[tag](ex.SPECS[name], model)
        onnx.save_model(proto, str(path), save_as_external_data=False)
        print(f"  exported {path.name}: {len(proto.graph.node)} nodes", flush=True)


def stage_peer(kind: str, src: str, dst: str) -> None:
    """(export venv) One peer on one file; prints its wall seconds."""
    start = time.perf_counter()
    if kind == "ort":
        from onnxruntime.transformers.optimizer import optimize_model

        name = Path(src).name.split(".")[0]
        opt = optimize_model(src, model_type=ORT_TYPES[name], num_heads=CONFIG["HEADS"],
                             hidden_size=_hidden_of(src), use_gpu=False)
        opt.save_model_to_file(dst)
    else:
        import onnx
        import onnx_ir as ir
        from onnxscript.rewriter.ort_fusions import optimize_for_ort

        model = ir.serde.deserialize_model(onnx.load(src))
        optimize_for_ort(model)
        onnx.save_model(ir.serde.serialize_model(model), dst)
    print(json.dumps({"seconds": time.perf_counter() - start}))


def _hidden_of(path: str) -> int:
    return int(Path(path).name.split(".h")[1].split(".")[0])


def model_file(name: str, tag: str, layers: int, hidden: int) -> str:
    return f"{name}.{tag}.l{layers}.h{hidden}.onnx"


# --------------------------------------------------------------------------- this venv


def node_count(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


def compile_bytecode() -> None:
    """Compile onnxopt's modules before the whole command is timed: an installed package has
    its bytecode, and where ``PYTHONDONTWRITEBYTECODE`` is set (these machines set it) every
    timed start would otherwise compile the sources again (about 0.15 s)."""
    import compileall

    compileall.compile_dir(str(ROOT / "onnxopt"), quiet=1)


def time_onnxopt(path: Path, repeat: int = 1) -> dict:
    """The whole command in a fresh process, its stage times and its peak memory: of
    ``repeat`` runs, the one with the median stage time (a single run on a shared machine
    can be a slow minute's, and time per node is compared across rows)."""
    runs = sorted((_time_onnxopt_once(path) for _ in range(repeat)),
                  key=lambda r: r["stages_s"])
    median = dict(runs[len(runs) // 2])
    median["runs"] = [{"wall_s": r["wall_s"], "stages_s": r["stages_s"]} for r in runs]
    return median


def _time_onnxopt_once(path: Path) -> dict:
    out, report = path.with_suffix(".opt.onnx"), path.with_suffix(".report.json")
    cmd = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "onnxopt", "optimize", str(path),
           "-o", str(out), "--target", "cpu", "-q", "--json", str(report)]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"onnxopt failed on {path.name}: {done.stderr.strip()}")
    data = json.loads(report.read_text())
    return {"wall_s": wall, "stages_s": sum(data["stage_seconds"].values()),
            "stage_seconds": data["stage_seconds"], "peak_mb": int(done.stderr.split()[-1]) / 1024,
            "nodes_after": data["total_nodes_after"]}


def session_pairs(original: Path, optimized: Path, pairs: int = 7) -> dict:
    """InferenceSession creation (default graph optimizations) of ``original`` and
    ``optimized`` in turn, ``pairs`` times each, in this process: both medians, and the
    median of each pair's ratio (optimized over original). Loads taken in turn see the same
    drift of this shared machine's speed; two series taken one after the other do not (three
    loads of each had put files 3 % slower or faster than their originals by chance)."""
    import onnxruntime as ort

    def load(path: Path) -> float:
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        start = time.perf_counter()
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return time.perf_counter() - start

    load(original)  # the first load of a process pays ORT's own start
    before, after = [], []
    for _ in range(pairs):
        before.append(load(original))
        after.append(load(optimized))
    return {"session_original_s": statistics.median(before),
            "session_optimized_s": statistics.median(after),
            "session_ratio": statistics.median(b / a for a, b in zip(before, after))}


def time_peer(kind: str, path: Path, timeout: float) -> float | None:
    dst = path.with_suffix(f".{kind}.onnx")
    try:
        done = subprocess.run([EXPORT_PYTHON, __file__, "--stage-peer", kind, str(path), str(dst)],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    return json.loads(lines[-1])["seconds"] if done.returncode == 0 and lines else None


def fit(rows: list[dict]) -> tuple[float, float]:
    """Least-squares line through (nodes, stage seconds): (slope µs/node, intercept s)."""
    xs = [r["nodes"] for r in rows]
    ys = [r["stages_s"] for r in rows]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs) or 1.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var
    return slope * 1e6, my - slope * mx


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[6, 12, 24, 48, 96])
    ap.add_argument("--models", nargs="+", default=["gpt2", "bert", "llama"])
    ap.add_argument("--exporters", nargs="+", default=["ts", "dynamo"])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--big-layers", type=int, default=512)
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--peer-timeout", type=float, default=300.0)
    ap.add_argument("--peer-layers", type=int, nargs="+",
                    help="time the peers only at these layer counts (default: every one)")
    ap.add_argument("--skip-export", action="store_true")
    ap.add_argument("--session-pairs", type=int, default=7,
                    help="loads of the original and the optimized file, taken in turn")
    ap.add_argument("--repeat", type=int, default=3,
                    help="whole-command runs per model; the median one is kept (the big "
                         "graph runs once)")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "_work" / "speed.json"))
    ap.add_argument("--stage-export", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--stage-peer", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stage_export is not None:
        specs = [tuple(json.loads(s)) for s in args.stage_export]
        stage_export(specs)
        return 0
    if args.stage_peer:
        stage_peer(*args.stage_peer)
        return 0
    specs = [(m, t, n, args.hidden) for m in args.models for t in args.exporters
             for n in args.layers]
    big = ("gpt2", "ts", args.big_layers, 32) if args.big_layers else None
    if not args.skip_export:
        todo = specs + ([big] if big else [])
        subprocess.run([EXPORT_PYTHON, __file__, "--stage-export",
                        *[json.dumps(s) for s in todo]], check=True)
    compile_bytecode()
    rows = []
    for spec in specs + ([big] if big else []):
        path = WORK / model_file(*spec)
        row = {"file": path.name, "nodes": node_count(path),
               **time_onnxopt(path, 1 if spec is big else args.repeat)}
        # ORT's session creation grows faster than linearly (about 8 s at 24,000 nodes, minutes
        # at 125,000): the big graph's sessions are created once each.
        row.update(session_pairs(path, path.with_suffix(".opt.onnx"),
                                 1 if spec is big else args.session_pairs))
        if args.peers and spec is not big and (not args.peer_layers
                                                or spec[2] in args.peer_layers):
            row["ort_optimizer_s"] = time_peer("ort", path, args.peer_timeout)
            row["onnxscript_s"] = time_peer("onnxscript", path, args.peer_timeout)
        rows.append(row)
        print(_row_text(row), flush=True)
    slope, intercept = fit([r for r in rows if r["file"] != (big and model_file(*big))])
    print(f"fit over {len(rows)} models: {slope:.1f} µs/node + {intercept:.3f} s")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"rows": rows, "fit_us_per_node": slope,
                                           "fit_intercept_s": intercept}, indent=1))
    return 0


def _row_text(r: dict) -> str:
    stages = " ".join(f"{k} {v:.2f}" for k, v in r["stage_seconds"].items())
    peers = ""
    if "ort_optimizer_s" in r:
        peers = (f" | ort-opt {_s(r['ort_optimizer_s'])} onnxscript {_s(r['onnxscript_s'])}")
    return (f"{r['file']:32s} {r['nodes']:7d} nodes  cli {r['wall_s']:6.2f} s  stages "
            f"{r['stages_s']:6.2f} s ({1e6 * r['stages_s'] / r['nodes']:5.0f} µs/node; {stages})  "
            f"peak {r['peak_mb']:5.0f} MB  session {r['session_original_s']:.3f} -> "
            f"{r['session_optimized_s']:.3f} s (pairs {r['session_ratio']:.3f}){peers}")


def _s(v: float | None) -> str:
    return "timeout" if v is None else f"{v:.2f} s"


if __name__ == "__main__":
    sys.exit(main())
