"""CPU speed of onnxopt's output against the original export and two anchors (issue 4).

    python benchmarks/cpu_speed.py                      # everything (~10 min on 2 cores)
    python benchmarks/cpu_speed.py --models gpt2 --exporters dynamo --shapes 1x128 --runs 5
    python benchmarks/cpu_speed.py --skip-export        # reuse the exports in benchmarks/_work
    python benchmarks/cpu_speed.py --export-python /path/to/venv-export/bin/python
    python benchmarks/cpu_speed.py --skip-export --baseline /tmp/previous-commit-worktree

Builds mid-size GPT-2, BERT and LLaMA (hidden 512, 8 heads, 4 layers, MLP 2048,
vocab 8192, LLaMA with 4 key/value heads; random weights, seeded, every parameter
perturbed so that no norm weight is exactly 1 and no bias exactly 0) with
``models/export.py``'s builders, exports each with both PyTorch exporters (in
the export venv, which has torch), and times, in ONNX Runtime on the CPU
provider with 1 intra-op thread and ``allow_spinning`` off:

- ``original``: the export as is;
- ``ort-opt``: ``onnxruntime.transformers.optimizer.optimize_model`` (model_type
  gpt2 / bert, and qwen3 — decoder-only with RoPE, GQA, RMSNorm — for LLaMA;
  default opt_level; run in the export venv, which has the torch it imports);
- ``onnxscript``: ``onnxscript.rewriter.ort_fusions.optimize_for_ort`` (export venv);
- ``onnxopt``: ``onnxopt optimize --target cpu``;
- ``onnxopt-tune``: the same with ``--tune`` (the tuning cache lives in
  benchmarks/_work/cpu_speed/tuning.json and is reused by later runs; ``--fresh-tune``
  deletes it first).

Every shape (batch x seq) runs the variants interleaved (one run of each per round,
the order rotated every round), after ``--warmup`` runs each; the figure is the
median of ``--runs`` rounds, split over ``--trials`` sets of fresh sessions (two
sessions of one file can differ by 2-3% for their whole life on this kind of
machine), and the table shows speed = original time / variant time.
Variant outputs are compared with the original's (max relative error). Onnxopt files
that come out byte-identical are timed once. Generated files go to
benchmarks/_work/cpu_speed/ (gitignored).
"""

from __future__ import annotations

import argparse
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
WORK = ROOT / "benchmarks" / "_work" / "cpu_speed"
EXPORT_PYTHON = "/work/venv-export/bin/python"

# name -> ORT optimizer model_type. Opt-in: gemma2 (soft-capped attention; dynamo only) and the
# vision families (pixel input [batch, 3, 32, 32]: --models diffusion,swin --shapes 1x0,4x0,
# batch x unused)
MODELS = {"gpt2": "gpt2", "bert": "bert", "llama": "qwen3"}
OPT_IN_MODELS = {"diffusion": "unet", "swin": "swin", "gemma2": "gpt2"}
CONFIG = {"HIDDEN": 512, "LAYERS": 4, "HEADS": 8, "KV_HEADS": 4, "INTERMEDIATE": 2048, "VOCAB": 8192,
              "MAX_POS": 1024}
VARIANTS = ("original", "ort-opt", "onnxscript", "onnxopt", "onnxopt-tune")


# --------------------------------------------------------------------------- export venv stages


def perturb(model, seed: int) -> None:
    """Add N(0, 0.02) to every parameter, as training would leave them.

    Hugging Face initialises norm weights to exactly 1 and linear biases to exactly 0;
    normalization removes a multiplication by ones and an addition of zeros, which a
    trained model never has — the optimized graph would be flattered by ops that real
    models keep (and a fusion that needs the weight's Mul would not be exercised).
    """
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.02)


def stage_export(names: list[str], exporters: list[str]) -> None:
    """(export venv) Build and export the mid-size models with models/export.py's builders."""
    import warnings

    sys.path.insert(0, str(ROOT / "models"))
    import export as ex  # models/export.py

    for key, value in CONFIG.items():
        setattr(ex, key, value)
    WORK.mkdir(parents=True, exist_ok=True)
    fns = {"ts": ex.export_ts, "dynamo": ex.export_dynamo}
    for name in names:
        for tag in exporters:
            path = WORK / f"{name}.{tag}.onnx"
            if path.exists():
                continue
            model = ex.build(ex.SPECS[name])
            perturb(model, ex.seed_for(ex.SPECS[name]))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                proto = fns[tag](ex.SPECS[name], model)
            import onnx

            WORK.mkdir(parents=True, exist_ok=True)  # other benchmarks may clear _work/
            onnx.save_model(proto, str(path), save_as_external_data=False)
            print(f"  exported {path.name}: {len(proto.graph.node)} nodes", flush=True)


def stage_anchors(paths: list[str]) -> None:
    """(export venv) The two anchors, each as its users run it.

    ONNX Runtime's transformer optimizer imports torch when it runs ORT's own graph
    optimizations first (opt_level >= 1), so it runs here too, with that venv's ORT.
    """
    import onnx_ir as ir
    from onnxruntime.transformers.optimizer import optimize_model
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    for src in paths:
        dst = _variant_path(Path(src), "ort-opt")
        if not dst.exists():
            # The preferred model_type first; when ORT's optimizer crashes on it (gpt2's
            # postprocess does on a Gemm without bias), the generic bert optimizer.
            name = Path(src).name.split(".")[0]
            for model_type in dict.fromkeys([{**MODELS, **OPT_IN_MODELS}[name], "bert"]):
                try:
                    text = name in MODELS  # (0: the optimizer detects them)
                    opt = optimize_model(src, model_type=model_type,
                                         num_heads=CONFIG["HEADS"] if text else 0,
                                         hidden_size=CONFIG["HIDDEN"] if text else 0,
                                         use_gpu=False)
                except Exception as e:  # noqa: BLE001 - report and fall back
                    print(f"  ort optimizer {Path(src).name} ({model_type}) failed: "
                          f"{type(e).__name__}: {e}", flush=True)
                    continue
                opt.save_model_to_file(str(dst))
                try:  # its output must load, or it is no anchor
                    import onnxruntime

                    onnxruntime.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
                except Exception as e:  # noqa: BLE001
                    print(f"  ort optimizer {Path(src).name} ({model_type}) wrote a model ONNX "
                          f"Runtime rejects: {str(e)[:160]}", flush=True)
                    dst.unlink()
                    continue
                fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
                print(f"  ort optimizer {Path(src).name} ({model_type}): {fused}", flush=True)
                dst.with_suffix(".json").write_text(json.dumps({"model_type": model_type,
                                                                "fused": fused}))
                break
        dst = _variant_path(Path(src), "onnxscript")
        if dst.exists():
            continue
        model = ir.load(src)
        model, counts = optimize_for_ort(model)
        ir.save(model, str(dst))
        fused = {k: v for k, v in counts.items() if v}
        print(f"  onnxscript {Path(src).name}: {fused}", flush=True)


# --------------------------------------------------------------------------- main venv stages


def _variant_path(src: Path, variant: str) -> Path:
    base = src.name.removesuffix(".onnx")
    return src.with_name(f"{base}.{variant}.onnx") if variant != "original" else src


def onnxopt(src: Path, tune: bool, cache: Path, checkout: Path = ROOT,
            variant: str | None = None) -> float:
    """Run ``onnxopt optimize --target cpu`` (from ``checkout``) and return its seconds."""
    variant = variant or ("onnxopt-tune" if tune else "onnxopt")
    dst = _variant_path(src, variant)
    cmd = [sys.executable, "-m", "onnxopt", "optimize", str(src), "-o", str(dst), "--target",
           "cpu", "-q", "--json", str(dst.with_suffix(".json"))]
    if tune:
        cmd += ["--tune", "--tune-cache", str(cache)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)})
    seconds = time.perf_counter() - start
    report = json.loads(dst.with_suffix(".json").read_text())
    chosen = (report.get("select") or {}).get("chosen", {})
    print(f"  {variant} {src.name}: {seconds:.1f} s, kernels {chosen}", flush=True)
    return seconds


def session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def feeds(batch: int, seq: int, vocab: int, names=("input_ids", "attention_mask")) -> dict:
    """Text inputs [batch, seq]; or, for a model taking ``pixel_values``, [batch, 3, 32, 32]."""
    import numpy as np

    rng = np.random.default_rng(batch * 1000 + seq)
    if "pixel_values" in names:
        return {"pixel_values": rng.standard_normal((batch, 3, 32, 32), dtype=np.float32)}
    return {"input_ids": rng.integers(2, vocab, (batch, seq), dtype=np.int64),
            "attention_mask": np.ones((batch, seq), np.int64)}


def time_model(files: dict[str, Path], shapes: list[tuple[int, int]], runs: int,
               warmup: int, trials: int) -> dict:
    """Interleaved timing of every variant at every shape; returns medians and errors.

    The rounds are split over ``trials``, each with fresh sessions created in a rotated
    order: two sessions of the very same file can differ by 2-3% for the whole life of the
    process (where their buffers landed), so the median pools several placements.
    """
    import gc

    import numpy as np

    unique: dict[str, str] = {}  # variant -> variant whose identical file it reuses
    digests: dict[str, str] = {}
    for variant, path in list(files.items()):
        if not path.exists():
            print(f"    {variant}: no file (its optimizer failed)", flush=True)
            del files[variant]
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        unique[variant] = digests.setdefault(digest, variant)
    timed = [v for v in files if unique[v] == v]
    for v in list(timed):
        try:
            session(files[v])
        except Exception as e:  # noqa: BLE001 - an anchor ONNX Runtime cannot load is reported
            print(f"    {v}: ONNX Runtime cannot load it: {str(e).splitlines()[0][:160]}",
                  flush=True)
            timed.remove(v)
    for v in list(files):
        if unique[v] not in timed:
            del files[v]
    samples = {shape: {v: [] for v in timed} for shape in shapes}
    errors: dict = {shape: {} for shape in shapes}
    failed: dict = {shape: {} for shape in shapes}  # variant -> why it fails at this shape
    per_trial = -(-runs // trials)
    for trial in range(trials):
        order = timed[trial % len(timed):] + timed[:trial % len(timed)]
        sessions = {v: session(files[v]) for v in order}
        for batch, seq in shapes:
            inputs = feeds(batch, seq, CONFIG["VOCAB"],
                           [i.name for i in sessions["original"].get_inputs()])
            ref = sessions["original"].run(None, inputs)[0]
            runs_here = [v for v in timed if v not in failed[(batch, seq)]]
            for v in list(runs_here):
                try:
                    got = sessions[v].run(None, inputs)[0]
                except Exception as e:  # noqa: BLE001 - an anchor that fails here is reported
                    failed[(batch, seq)][v] = str(e).splitlines()[0][:200]
                    print(f"    {v} fails at {batch}x{seq}: {failed[(batch, seq)][v]}", flush=True)
                    runs_here.remove(v)
                    continue
                if trial == 0:
                    scale = max(1.0, float(np.abs(ref).max()))
                    errors[(batch, seq)][v] = float(np.abs(got - ref).max() / scale)
                for _ in range(warmup - 1):
                    sessions[v].run(None, inputs)
            for r in range(per_trial):
                for v in runs_here[r % len(runs_here):] + runs_here[:r % len(runs_here)]:
                    start = time.perf_counter()
                    sessions[v].run(None, inputs)
                    samples[(batch, seq)][v].append(time.perf_counter() - start)
        del sessions
        gc.collect()
    out: dict = {}
    for batch, seq in shapes:
        ran = [v for v in files if unique[v] not in failed[(batch, seq)]]
        medians = {v: statistics.median(samples[(batch, seq)][unique[v]]) for v in ran}
        out[f"{batch}x{seq}"] = {"ms": {v: medians[v] * 1000 for v in ran},
                                 "rel_err": {v: errors[(batch, seq)][unique[v]] for v in ran},
                                 "fails": {v: failed[(batch, seq)][unique[v]]
                                           for v in files if v not in ran}}
        row = "  ".join(f"{v} {medians['original'] / medians[v]:.3f}" for v in ran)
        print(f"    {batch}x{seq}: original {medians['original'] * 1000:.1f} ms; {row}", flush=True)
    return out


def table(results: dict, shapes: list[str]) -> str:
    """Markdown: one row per model and shape, speed of each variant vs the original."""
    present = {v for per_shape in results.values() for row in per_shape.values() for v in row["ms"]}
    variants = [v for v in (*VARIANTS, "baseline") if v != "original" and v in present]
    lines = ["| model | shape | original ms | " + " | ".join(variants) + " | onnxopt ≥ best anchor |",
             "|---|---|---:|" + "---:|" * len(variants) + ":---:|"]
    speeds: dict[str, list[float]] = {v: [] for v in variants}
    for model, per_shape in results.items():
        for shape in shapes:
            ms = per_shape[shape]["ms"]
            s = {v: ms["original"] / ms[v] for v in variants if v in ms}
            for v, x in s.items():
                speeds[v].append(x)
            anchors = max(s.get("ort-opt", 0), s.get("onnxscript", 0))
            best = max(s.get("onnxopt", 0), s.get("onnxopt-tune", 0))
            lines.append(f"| {model} | {shape} | {ms['original']:.1f} | "
                         + " | ".join(f"{s[v]:.3f}" if v in s else
                                      "fails" if v in per_shape[shape].get("fails", {}) else "–"
                                      for v in variants)
                         + f" | {'yes' if best >= anchors else 'no'} |")
    geo = {v: math.exp(statistics.fmean(math.log(x) for x in xs)) for v, xs in speeds.items() if xs}
    lines.append("| **geometric mean** | | | " + " | ".join(
        f"**{geo[v]:.3f}**" if v in geo else "–" for v in variants) + " | |")
    lines.append("| **minimum** | | | " + " | ".join(
        f"{min(speeds[v]):.3f}" if speeds[v] else "–" for v in variants) + " | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--stage", choices=["export", "anchors"], help=argparse.SUPPRESS)
    ap.add_argument("--paths", nargs="*", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--exporters", default="ts,dynamo")
    ap.add_argument("--shapes", default="1x128,1x512,8x128")
    ap.add_argument("--runs", type=int, default=25, help="timed rounds (median of these)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--trials", type=int, default=3,
                    help="fresh sessions this many times (rounds split between them)")
    ap.add_argument("--export-python", default=EXPORT_PYTHON,
                    help="python with torch, transformers and onnxscript (export + onnxscript)")
    ap.add_argument("--skip-export", action="store_true", help="reuse files in benchmarks/_work")
    ap.add_argument("--fresh-tune", action="store_true", help="delete the tuning cache first")
    ap.add_argument("--json", default=str(WORK / "results.json"))
    ap.add_argument("--baseline", type=Path,
                    help="another onnxopt checkout (e.g. a git worktree of the previous commit),"
                         " optimized and timed side by side as the 'baseline' variant")
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    exporters = [e for e in args.exporters.split(",") if e]
    if args.stage == "export":
        stage_export(names, exporters)
        return 0
    if args.stage == "anchors":
        stage_anchors(args.paths)
        return 0

    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    WORK.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    sources = [WORK / f"{n}.{e}.onnx" for n in names for e in exporters]
    if not args.skip_export:
        for p in sources:
            for v in VARIANTS[1:]:
                _variant_path(p, v).unlink(missing_ok=True)
        print("export (export venv) ...", flush=True)
        subprocess.run([args.export_python, __file__, "--stage", "export", "--models",
                        ",".join(names), "--exporters", ",".join(exporters)], check=True)
    missing = [p for p in sources if not (_variant_path(p, "onnxscript").exists()
                                          and _variant_path(p, "ort-opt").exists())]
    if missing:
        print("anchors (export venv) ...", flush=True)
        subprocess.run([args.export_python, __file__, "--stage", "anchors", "--paths",
                        *map(str, missing)], check=True)
    cache = WORK / "tuning.json"
    if args.fresh_tune:
        cache.unlink(missing_ok=True)
    optimize_seconds = {}
    for src in sources:
        optimize_seconds[src.name] = {"onnxopt": onnxopt(src, False, cache),
                                      "onnxopt-tune": onnxopt(src, True, cache)}
        if args.baseline:
            optimize_seconds[src.name]["baseline"] = onnxopt(src, False, cache, args.baseline,
                                                             "baseline")
    results = {}
    for src in sources:
        name = src.name.removesuffix(".onnx")
        print(f"timing {name} ...", flush=True)
        files = {v: _variant_path(src, v)
                 for v in (*VARIANTS, *(["baseline"] if args.baseline else []))}
        results[name] = time_model(files, shapes, args.runs, args.warmup, args.trials)
    shape_keys = [f"{b}x{s}" for b, s in shapes]
    md = table(results, shape_keys)
    print()
    print(md)
    import onnxruntime

    from onnxopt.select.tuning import cpu_model

    meta = {"date": subprocess.run(["date"], capture_output=True, text=True,
                                   check=False).stdout.strip(),
            "machine": f"{os.cpu_count()} cores, {cpu_model()}", "onnxruntime": onnxruntime.__version__,
            "command": "python benchmarks/cpu_speed.py " + " ".join(argv or sys.argv[1:]),
            "seconds": round(time.perf_counter() - started, 1), "optimize_seconds": optimize_seconds}
    print(f"\n{meta['date']}; {meta['machine']}; onnxruntime {meta['onnxruntime']}; "
          f"{meta['seconds']} s in all")
    Path(args.json).write_text(json.dumps({"meta": meta, "results": results, "table": md},
                                          indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
