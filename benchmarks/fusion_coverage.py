"""Fusion coverage: onnxopt against ONNX Runtime's transformer optimizer and the onnxscript rewriter.

For every model in ``models/`` it records, per tool: attention blocks fused,
norm blocks (LayerNorm, RMSNorm) fused, GroupNorm blocks fused, whether the output still computes the same function
(``onnxopt.verify`` in ONNX Runtime, float32 relative error < 1e-4), and the
optimizer's wall time. The anchors need torch and onnxscript, which onnxopt
does not depend on, so they run in another interpreter (``--anchor-python``,
e.g. the venv that ``models/export.py`` uses).

    python benchmarks/fusion_coverage.py --anchor-python /work/venv-export/bin/python \
        [--models models] [--markdown benchmarks/_work/fusion_coverage.md] [--only deberta_v2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
ATTENTION_OPS = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention",
                 "PackedMultiHeadAttention", "AttentionFused"}
NORM_OPS = {"SkipLayerNormalization", "SimplifiedLayerNormalization", "LayerNormalization",
            "SkipSimplifiedLayerNormalization", "RMSNormalization", "EmbedLayerNormalization",
            "LayerNormFused", "RMSNormFused"}
GROUP_NORM_OPS = {"GroupNorm", "SkipGroupNorm", "GroupNormFused"}
# ORT's optimizer is told each family's model type (bert for the rest, its generic optimizer)
MODEL_TYPES = {"gpt2": "gpt2", "bert": "bert", "roberta": "bert", "vit": "vit", "t5enc": "t5",
               "llama": "gpt2", "mistral": "gpt2", "clip_text": "clip", "gpt_neox": "gpt_neox",
               "swin": "swin", "diffusion": "unet"}

ANCHORS = r'''
import json, sys, time
import onnx
out = {}
src, ort_out, osc_out, model_type = sys.argv[1:5]
t = time.perf_counter()
try:
    from onnxruntime.transformers.optimizer import optimize_model
    m = optimize_model(src, model_type=model_type, num_heads=0, hidden_size=0)
    m.save_model_to_file(ort_out)
    out["ort"] = {"seconds": time.perf_counter() - t}
except Exception as e:
    out["ort"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
t = time.perf_counter()
try:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort
    model = ir.load(src)
    model, _ = optimize_for_ort(model)
    ir.save(model, osc_out)
    out["onnxscript"] = {"seconds": time.perf_counter() - t}
except Exception as e:
    out["onnxscript"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
print(json.dumps(out))
'''


def norm_blocks(model: onnx.ModelProto) -> int:
    """Norm blocks in the original: native LayerNormalization nodes and decomposed norms."""
    g = model.graph
    producers = {o: n for n in g.node for o in n.output}
    count = 0
    for n in g.node:
        if n.op_type in ("LayerNormalization", "RMSNormalization"):
            count += 1
        elif n.op_type == "ReduceMean":
            src = producers.get(n.input[0])
            if src is not None and src.op_type in ("Pow", "Mul") and (
                    src.op_type == "Pow" or src.input[0] == src.input[1]):
                count += 1  # variance / mean square: one per decomposed norm
    return count


def group_norm_blocks(model: onnx.ModelProto) -> int:
    """GroupNorm blocks in the original: ONNX GroupNormalization, and InstanceNormalization on
    a grouped view (how both PyTorch exporters write nn.GroupNorm)."""
    return sum(n.op_type in ("GroupNormalization", "InstanceNormalization")
               for n in model.graph.node)


def count_ops(path: str, ops: set[str]) -> int:
    model = onnx.load(path, load_external_data=False)
    return sum(1 for n in model.graph.node if n.op_type in ops)


def run_onnxopt(src: str, out: str) -> dict:
    from onnxopt.api import optimize

    t = time.perf_counter()
    result = optimize(src, output=out, target="cpu", return_result=True)
    seconds = time.perf_counter() - t
    fuse = result.report.stages.get("fuse")
    summary = fuse.summary() if fuse else {}
    return {
        "seconds": seconds,
        "attention": summary.get("attention", {}).get("fused", 0),
        "norms": sum(summary.get(r, {}).get("fused", 0) for r in ("layer_norm", "rms_norm")),
        "group_norms": summary.get("group_norm", {}).get("fused", 0),
    }


def verify_ok(src: str, out: str) -> str:
    from onnxopt.verification import verify_models

    try:
        report = verify_models(src, out, runs=2)
    except Exception as e:  # noqa: BLE001 - an anchor's output may not even load
        return f"does not run ({str(e).splitlines()[0][:80]})"
    return "equal" if report.ok else f"DIFFERS (rel {max(o.max_rel for o in report.outputs):.1e})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--anchor-python", default=None)
    ap.add_argument("--models", default=str(ROOT / "models"))
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--only", default="", help="comma-separated architectures (deberta_v2,...)")
    args = ap.parse_args()
    only = {a for a in args.only.split(",") if a}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(Path(args.models).glob("*.onnx")):
            name = path.name.removesuffix(".onnx")
            if only and name.split(".")[0] not in only:
                continue
            original = onnx.load(str(path))
            blocks = {"attention": sum(n.op_type == "Softmax" for n in original.graph.node),
                      "norms": norm_blocks(original),
                      "group_norms": group_norm_blocks(original)}
            row = {"model": name, **{f"total_{k}": v for k, v in blocks.items()}}
            out = os.path.join(tmp, f"{name}.onnxopt.onnx")
            r = run_onnxopt(str(path), out)
            row["onnxopt"] = {**r, "verify": verify_ok(str(path), out)}
            if args.anchor_python:
                ort_out = os.path.join(tmp, f"{name}.ort.onnx")
                osc_out = os.path.join(tmp, f"{name}.osc.onnx")
                arch = name.split(".")[0]
                proc = subprocess.run([args.anchor_python, "-c", ANCHORS, str(path), ort_out,
                                       osc_out, MODEL_TYPES.get(arch, "bert")],
                                      capture_output=True, text=True, timeout=600, check=False)
                try:
                    anchors = json.loads(proc.stdout.strip().splitlines()[-1])
                except (IndexError, json.JSONDecodeError):
                    anchors = {"ort": {"error": proc.stderr[-200:]},
                               "onnxscript": {"error": proc.stderr[-200:]}}
                for key, file in (("ort", ort_out), ("onnxscript", osc_out)):
                    a = anchors.get(key, {})
                    if "error" not in a and os.path.exists(file):
                        a["attention"] = count_ops(file, ATTENTION_OPS)
                        a["norms"] = count_ops(file, NORM_OPS)
                        a["group_norms"] = count_ops(file, GROUP_NORM_OPS)
                        a["verify"] = verify_ok(str(path), file)
                    row[key] = a
            rows.append(row)
            print(json.dumps(row), flush=True)
    table = markdown(rows)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0


def markdown(rows: list[dict]) -> str:
    tools = [t for t in ("onnxopt", "ort", "onnxscript") if any(t in r for r in rows)]
    head = "| model | attention blocks | norm blocks | GroupNorm blocks | " + " | ".join(
        f"{t}: attention / norms / GroupNorms / numerics / seconds" for t in tools) + " |"
    lines = [head, "|" + "---|" * (4 + len(tools))]
    totals = Counter()
    kinds = ("attention", "norms", "group_norms")
    for r in rows:
        cells = [r["model"], *(str(r.get(f"total_{k}", 0)) for k in kinds)]
        for k in kinds:
            totals[k] += r.get(f"total_{k}", 0)
        for t in tools:
            a = r.get(t, {})
            if "error" in a:
                cells.append(f"failed: {a['error'][:60]}")
                continue
            for k in kinds:
                totals[f"{t}_{k}"] += min(a.get(k, 0), r.get(f"total_{k}", 0))
            totals[f"{t}_equal"] += a.get("verify") == "equal"
            cells.append(" / ".join(str(a.get(k, 0)) for k in kinds)
                         + f" / {a.get('verify')} / {a.get('seconds', 0):.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["**total**", *(str(totals[k]) for k in kinds)]
    for t in tools:
        cells.append("**" + " / ".join(str(totals[f"{t}_{k}"]) for k in kinds)
                     + f" / {totals[f'{t}_equal']} of {len(rows)} equal**")
    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
