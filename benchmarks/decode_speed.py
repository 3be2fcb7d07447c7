"""Decode-step speed: onnxopt against the original and two anchors on decoder-with-past models
(issue 32).

    python benchmarks/decode_speed.py                              # everything
    python benchmarks/decode_speed.py --models gpt2 --exporters ts --cells decode_b4_p511
    python benchmarks/decode_speed.py --skip-export                # reuse benchmarks/_work
    python benchmarks/decode_speed.py --skip-export --baseline /work/main   # before/after

Builds Optimum-style ``decoder_with_past`` models (input_ids [batch, seq], attention_mask
[batch, past + seq], past key/value per layer in, logits and present key/value out) of
GPT-2 (eager attention), LLaMA (SDPA, 8 heads over 4 key/value heads) and Qwen2 (SDPA, GQA,
q/k/v biases) at hidden 512, 4 layers, MLP 2048, vocab 8192, 4,096 positions (random
weights, seeded, perturbed as in ``cpu_speed.py``) with ``models/export.py``'s
``build_with_past``, exports each with both PyTorch exporters, and times in ONNX Runtime
(CPU provider, 1 intra-op thread, no spinning):

- ``original``: the export as is;
- ``ort-opt``: ``onnxruntime.transformers.optimizer.optimize_model`` (model_type gpt2 for
  GPT-2, qwen3 for LLaMA and Qwen2; the generic bert optimizer where that one fails);
- ``onnxscript``: ``onnxscript.rewriter.ort_fusions.optimize_for_ort``;
- ``onnxopt``: ``onnxopt optimize --target cpu`` (this checkout);
- ``onnxopt-tune``: the same with ``--tune`` (``--tune``);
- ``baseline``: the same from another checkout (``--baseline``), e.g. before a change;
- ``original-again``: a second session of the original (``--control``), timed like the
  others: its speed (1.0 but for noise) is how far the machine's load moves a ratio, the
  floor below which a variant's difference from the original means nothing.

``--stage if-cost`` times what an ``If`` costs ONNX Runtime per run (one per attention block
where selection switches kernels by query length): a chain of Softmax nodes with and without
an ``If`` around each. (Around a decode attention whose branches read a Concat-made cache the
``If`` costs far more: ``benchmarks/if_cache_cost.py``.)

Cells (batch, new tokens, past): decode 1x1 past 127, 1x1 past 1023, 4x1 past 511, 1x1 past
4095, and a 128-token prefill (1x128, past 0). Every cell runs the variants interleaved
(one run of each per round, the order rotated every round) in ``--trials`` passes with fresh
sessions; a pass's speed of a variant is the median over its rounds of original time /
variant time in the same round (a round's load, on a shared machine, slows both), and the
figure is the median of the passes' speeds (times: the median of the passes' medians). Outputs (logits and every present) are compared with
the original's (max relative error).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "_work" / "decode_speed"
sys.path.insert(0, str(ROOT / "benchmarks"))

from cpu_speed import perturb, session

MODELS = {"gpt2": "gpt2", "llama": "qwen3", "qwen2": "qwen3"}
CONFIG = {"HIDDEN": 512, "LAYERS": 4, "HEADS": 8, "KV_HEADS": 4, "INTERMEDIATE": 2048,
          "VOCAB": 8192, "MAX_POS": 4096}
# label -> (batch, new tokens, past)
CELLS = {"decode_b1_p127": (1, 1, 127), "decode_b1_p1023": (1, 1, 1023),
         "decode_b4_p511": (4, 1, 511), "decode_b1_p4095": (1, 1, 4095),
         "prefill_b1_s128": (1, 128, 0)}
VARIANTS = ("original", "ort-opt", "onnxscript", "onnxopt")
CONTROL = "original-again"


def _variant_path(src: Path, variant: str) -> Path:
    base = src.name.removesuffix(".onnx")
    return src.with_name(f"{base}.{variant}.onnx") if variant != "original" else src


def stage_export(names: list[str], exporters: list[str]) -> None:
    import warnings

    import onnx

    sys.path.insert(0, str(ROOT / "models"))
    import export as ex  # models/export.py

    for key, value in CONFIG.items():
        setattr(ex, key, value)
    WORK.mkdir(parents=True, exist_ok=True)
    for name in names:
        for tag in exporters:
            path = WORK / f"{name}.{tag}.onnx"
            if path.exists():
                continue
            wrapper = ex.build_with_past(name)
            perturb(wrapper, 7)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                proto = ex.export_with_past(wrapper, tag)
            onnx.save_model(proto, str(path), save_as_external_data=False)
            err = ex.verify_with_past(wrapper, str(path))
            print(f"  exported {path.name}: {len(proto.graph.node)} nodes, rel err vs torch "
                  f"{err:.1e}", flush=True)


def stage_anchors(paths: list[str]) -> None:
    import onnx_ir as ir
    import onnxruntime
    from onnxruntime.transformers.optimizer import optimize_model
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    for src in paths:
        name = Path(src).name.split(".")[0]
        dst = _variant_path(Path(src), "ort-opt")
        if not dst.exists():
            for model_type in dict.fromkeys([MODELS[name], "bert"]):
                try:
                    opt = optimize_model(src, model_type=model_type, num_heads=CONFIG["HEADS"],
                                         hidden_size=CONFIG["HIDDEN"], use_gpu=False)
                    opt.save_model_to_file(str(dst))
                    onnxruntime.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
                except Exception as e:  # noqa: BLE001 - report and fall back
                    print(f"  ort optimizer {Path(src).name} ({model_type}) failed: "
                          f"{type(e).__name__}: {str(e)[:160]}", flush=True)
                    dst.unlink(missing_ok=True)
                    continue
                fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
                print(f"  ort optimizer {Path(src).name} ({model_type}): {fused}", flush=True)
                break
        dst = _variant_path(Path(src), "onnxscript")
        if not dst.exists():
            try:
                model, counts = optimize_for_ort(ir.load(src))
                ir.save(model, str(dst))
                print(f"  onnxscript {Path(src).name}: "
                      f"{ {k: v for k, v in counts.items() if v} }", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"  onnxscript {Path(src).name} failed: {type(e).__name__}: "
                      f"{str(e)[:160]}", flush=True)


def run_onnxopt(src: Path, variant: str, checkout: Path, extra: list[str]) -> None:
    dst = _variant_path(src, variant)
    cmd = [sys.executable, "-m", "onnxopt", "optimize", str(src), "-o", str(dst), "--target",
           "cpu", "-q", "--json", str(dst.with_suffix(".json")), *extra]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)})
    report = json.loads(dst.with_suffix(".json").read_text())
    chosen = (report.get("select") or {}).get("chosen", {})
    print(f"  {variant} {src.name}: {time.perf_counter() - start:.1f} s, kernels {chosen}",
          flush=True)


def cell_feeds(sess, batch: int, seq: int, past: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(1000 * batch + 10 * seq + past)
    out = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            out[i.name] = rng.integers(2, CONFIG["VOCAB"], (batch, seq), dtype=np.int64)
        elif i.name == "attention_mask":
            out[i.name] = np.ones((batch, past + seq), np.int64)
        else:
            heads, dim = i.shape[1], i.shape[3]
            out[i.name] = rng.standard_normal((batch, heads, past, dim), dtype=np.float32)
    return out


def time_model(files: dict[str, Path], cells: list[str], runs: int, warmup: int,
               trials: int) -> dict:
    """Interleaved timing; per cell and variant the median of ``trials`` passes' medians."""
    import numpy as np

    unique, digests = {}, {}
    for variant, path in list(files.items()):
        if not path.exists():
            print(f"    {variant}: no file", flush=True)
            del files[variant]
            continue
        # The control is the original's file in a session of its own: never merged with it.
        digest = variant if variant == CONTROL else hashlib.sha256(path.read_bytes()).hexdigest()
        unique[variant] = digests.setdefault(digest, variant)
    timed = [v for v in files if unique[v] == v]
    for v in list(timed):
        try:
            session(files[v])
        except Exception as e:  # noqa: BLE001
            print(f"    {v}: ONNX Runtime cannot load it: {str(e).splitlines()[0][:160]}")
            timed.remove(v)
    for v in list(files):
        if unique[v] not in timed:
            del files[v]
    passes = {c: {v: [] for v in timed} for c in cells}
    errors = {c: {} for c in cells}
    failed = {c: {} for c in cells}
    speeds: dict = {c: {} for c in cells}  # per pass: median over rounds of original / variant
    for trial in range(trials):
        order = timed[trial % len(timed):] + timed[:trial % len(timed)]
        sessions = {v: session(files[v]) for v in order}
        for cell in cells:
            feeds = cell_feeds(sessions["original"], *CELLS[cell])
            ref = sessions["original"].run(None, feeds)
            here = [v for v in timed if v not in failed[cell]]
            for v in list(here):
                try:
                    got = sessions[v].run(None, feeds)
                except Exception as e:  # noqa: BLE001
                    failed[cell][v] = str(e).splitlines()[0][:200]
                    print(f"    {v} fails at {cell}: {failed[cell][v]}", flush=True)
                    here.remove(v)
                    continue
                if trial == 0:
                    errors[cell][v] = max(float(np.abs(g - r).max() / max(1.0, np.abs(r).max()))
                                          for g, r in zip(got, ref))
                for _ in range(warmup - 1):
                    sessions[v].run(None, feeds)
            samples = {v: [] for v in here}
            for r in range(runs):
                for v in here[r % len(here):] + here[:r % len(here)]:
                    start = time.perf_counter()
                    sessions[v].run(None, feeds)
                    samples[v].append(time.perf_counter() - start)
            for v in here:
                passes[cell][v].append(statistics.median(samples[v]))
                if "original" in here:  # this pass's speed: the median of per-round ratios
                    speeds[cell].setdefault(v, []).append(statistics.median(
                        o / x for o, x in zip(samples["original"], samples[v])))
        del sessions
        gc.collect()
    out = {}
    for cell in cells:
        ran = [v for v in files if unique[v] not in failed[cell]]
        med = {v: statistics.median(passes[cell][unique[v]]) for v in ran}
        out[cell] = {"ms": {v: med[v] * 1000 for v in ran},
                     "speed": {v: statistics.median(speeds[cell][unique[v]]) for v in ran
                               if speeds[cell].get(unique[v])},
                     "passes_ms": {v: [x * 1000 for x in passes[cell][unique[v]]] for v in ran},
                     "rel_err": {v: errors[cell][unique[v]] for v in ran},
                     "fails": {v: failed[cell][unique[v]] for v in files if v not in ran}}
        row = "  ".join(f"{v} {out[cell]['speed'][v]:.3f}" for v in ran if v != "original")
        print(f"    {cell}: original {med['original'] * 1000:.2f} ms; {row}", flush=True)
    return out


def stage_if_cost(runs: int, blocks: int = 4, keys: int = 1024) -> None:
    """What an ``If`` costs per run: ``blocks`` Softmax nodes over ``[batch, 8, seq, keys]``
    (symbolic batch and seq, as in a decoder: ORT cannot fold the condition away) in a chain,
    bare and each inside an ``If`` on the query count; interleaved, ``runs`` x 100 rounds."""
    import numpy as np
    from onnx import TensorProto, helper

    def model(switched: bool) -> bytes:
        nodes = [helper.make_node("Shape", ["x"], ["shape"]),
                 helper.make_node("Gather", ["shape", "axis"], ["queries"], axis=0),
                 helper.make_node("Less", ["queries", "two"], ["few"])]
        x = "x"
        for k in range(blocks):
            if switched:
                branches = {f"{side}_branch": helper.make_graph(
                    [helper.make_node("Softmax", [x], [f"{side}{k}"], axis=-1)], f"{side}{k}",
                    [], [helper.make_tensor_value_info(f"{side}{k}", TensorProto.FLOAT, None)])
                    for side in ("then", "else")}
                nodes.append(helper.make_node("If", ["few"], [f"y{k}"], **branches))
            else:
                nodes.append(helper.make_node("Softmax", [x], [f"y{k}"], axis=-1))
            x = f"y{k}"
        graph = helper.make_graph(
            nodes, "chain",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, "seq", keys])],
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
            [helper.make_tensor("axis", TensorProto.INT64, [1], [2]),
             helper.make_tensor("two", TensorProto.INT64, [1], [2])])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        proto.ir_version = 9
        return proto.SerializeToString()

    WORK.mkdir(parents=True, exist_ok=True)
    sessions = []
    for switched in (False, True):
        path = WORK / f"if_cost.{'if' if switched else 'bare'}.onnx"
        path.write_bytes(model(switched))
        sessions.append(session(path))
    feeds = {"x": np.random.default_rng(0).random((1, 8, 1, keys), dtype=np.float32)}
    times = [[], []]
    for r in range(runs * 100):
        for k in (r % 2, 1 - r % 2):
            start = time.perf_counter()
            sessions[k].run(None, feeds)
            times[k].append(time.perf_counter() - start)
    bare, switched = (statistics.median(t) * 1e6 for t in times)
    print(f"{blocks} Softmax over [1, 8, 1, {keys}]: bare {bare:.1f} us, each in an If "
          f"{switched:.1f} us: {(switched - bare) / blocks:.2f} us per If")


def table(results: dict, cells: list[str]) -> str:
    present = {v for per in results.values() for row in per.values() for v in row["ms"]}
    variants = [v for v in (*VARIANTS, "onnxopt-tune", "baseline", CONTROL)
                if v != "original" and v in present]
    lines = ["| model | cell | original ms | " + " | ".join(variants) + " | onnxopt max rel err |",
             "|---|---|---:|" + "---:|" * len(variants) + "---:|"]
    speeds = {(v, kind): [] for v in variants for kind in ("decode", "prefill")}
    for model, per in results.items():
        for cell in cells:
            ms = per[cell]["ms"]
            s = {v: per[cell]["speed"][v] for v in variants if v in per[cell]["speed"]}
            kind = cell.split("_")[0]
            for v, x in s.items():
                speeds[(v, kind)].append(x)
            err = per[cell]["rel_err"].get("onnxopt")
            lines.append(f"| {model} | {cell} | {ms['original']:.2f} | "
                         + " | ".join(f"{s[v]:.3f}" if v in s else
                                      "fails" if v in per[cell]["fails"] else "–"
                                      for v in variants)
                         + (f" | {err:.1e} |" if err is not None else " | – |"))
    for kind in ("decode", "prefill"):
        xs = {v: speeds[(v, kind)] for v in variants if speeds[(v, kind)]}
        if not xs:
            continue
        lines.append(f"| **{kind} geomean** | | | " + " | ".join(
            f"**{math.exp(statistics.fmean(math.log(x) for x in xs[v])):.3f}**" if v in xs
            else "–" for v in variants) + " | |")
        lines.append(f"| **{kind} minimum** | | | " + " | ".join(
            f"{min(xs[v]):.3f}" if v in xs else "–" for v in variants) + " | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--stage", choices=["export", "anchors", "if-cost"],
                    help="if-cost: time an If around a node (the rest: internal)")
    ap.add_argument("--paths", nargs="*", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--exporters", default="ts,dynamo")
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--runs", type=int, default=15, help="timed rounds per pass")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--trials", type=int, default=3, help="passes, each with fresh sessions")
    ap.add_argument("--skip-export", action="store_true")
    ap.add_argument("--onnxopt-args", default="", help="extra arguments for onnxopt optimize")
    ap.add_argument("--baseline", type=Path, help="another onnxopt checkout, timed as 'baseline'")
    ap.add_argument("--tune", action="store_true",
                    help="also onnxopt --tune ('onnxopt-tune'; cache in benchmarks/_work/"
                         "decode_speed/tuning.json, reused)")
    ap.add_argument("--control", action="store_true",
                    help="also time a second session of the original ('original-again')")
    ap.add_argument("--json", default=str(WORK / "results.json"))
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    exporters = [e for e in args.exporters.split(",") if e]
    if args.stage == "export":
        stage_export(names, exporters)
        return 0
    if args.stage == "anchors":
        stage_anchors(args.paths)
        return 0
    if args.stage == "if-cost":
        stage_if_cost(args.runs)
        return 0
    cells = [c for c in args.cells.split(",") if c]
    WORK.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    sources = [WORK / f"{n}.{e}.onnx" for n in names for e in exporters]
    if not args.skip_export:
        subprocess.run([sys.executable, __file__, "--stage", "export", "--models",
                        ",".join(names), "--exporters", ",".join(exporters)], check=True)
    missing = [str(p) for p in sources if not (_variant_path(p, "onnxscript").exists()
                                               and _variant_path(p, "ort-opt").exists())]
    if missing:
        subprocess.run([sys.executable, __file__, "--stage", "anchors", "--paths", *missing],
                       check=True)
    extra = args.onnxopt_args.split()
    for src in sources:
        run_onnxopt(src, "onnxopt", ROOT, extra)
        if args.baseline:
            run_onnxopt(src, "baseline", args.baseline, [])
        if args.tune:
            run_onnxopt(src, "onnxopt-tune", ROOT,
                        [*extra, "--tune", "--tune-cache", str(WORK / "tuning.json")])
    results = {}
    for src in sources:
        name = src.name.removesuffix(".onnx")
        print(f"timing {name} ...", flush=True)
        more = (["baseline"] if args.baseline else []) + (["onnxopt-tune"] if args.tune else [])
        files = {v: _variant_path(src, v) for v in (*VARIANTS, *more)}
        if args.control:
            files[CONTROL] = src
        results[name] = time_model(files, cells, args.runs, args.warmup, args.trials)
    md = table(results, cells)
    print()
    print(md)
    import onnxruntime

    from onnxopt.select.tuning import cpu_model

    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.cpu_count()} cores (shared), {cpu_model()}",
            "onnxruntime": onnxruntime.__version__,
            "command": "python benchmarks/decode_speed.py " + " ".join(argv or sys.argv[1:]),
            "seconds": round(time.perf_counter() - started, 1)}
    print(f"\n{meta['date']}; {meta['machine']}; onnxruntime {meta['onnxruntime']}; "
          f"{meta['seconds']} s in all")
    Path(args.json).write_text(json.dumps({"meta": meta, "results": results, "table": md},
                                          indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
