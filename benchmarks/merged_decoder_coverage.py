"""Attention coverage per branch of merged decoders (``models/other/merged/``, and Optimum's
``models/other/merged_decoder_*.onnx``): AttentionFused nodes in the with-past (then) and the
no-past (else) branch after normalize + fuse, against the attention blocks there (one per
layer), and the refusal codes of the rest.

``--mask-length-repeat`` also runs each file whose no-past branch repeats K/V heads with the
repeat's key length read from ``Shape(attention_mask)`` instead of ``Shape(input_ids)`` (the
issue's spelling: ``total_sequence`` at the top level, equal to ``sequence`` in that branch).

    python benchmarks/merged_decoder_coverage.py [--mask-length-repeat] [--markdown] [FILE ...]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import onnx
from onnx import helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onnxopt import normalize
from onnxopt.fuse import fuse
from onnxopt.importer import import_model
from onnxopt.legality.target import Target
from onnxopt.options import OptimizeOptions
from onnxopt.rules import all_rules

FILES = [*sorted((ROOT / "models" / "other" / "merged").glob("*.onnx")),
         *sorted((ROOT / "models" / "other").glob("merged_decoder_*.onnx"))]


def repeat_from_mask_length(proto: onnx.ModelProto) -> int:
    """Rewrite the no-past branch's head-repeat Reshape targets to take the key length from
    ``Shape(attention_mask)[1]``; the number of targets rewritten."""
    branch = next(a.g for a in proto.graph.node[0].attribute if a.name == "else_branch")
    made = {o: n for n in branch.node for o in n.output}
    edited = 0
    for n in list(branch.node):
        src = made.get(n.input[0]) if n.op_type == "Reshape" else None
        if src is None or src.op_type != "Expand" or \
                made.get(src.input[0], src).op_type != "Unsqueeze":
            continue
        concat = made.get(n.input[1])
        if concat is None or concat.op_type != "Concat":
            continue
        for i, part in enumerate(concat.input):
            shape = made.get(part)
            if shape is not None and shape.op_type == "Shape" and \
                    any(a.name == "start" and a.i == 1 for a in shape.attribute):
                name = f"{part}_from_mask"
                if name not in made:
                    branch.node.insert(0, helper.make_node("Shape", ["attention_mask"], [name],
                                                           start=1, end=2))
                    made[name] = branch.node[0]
                concat.input[i] = name
                edited += 1
    return edited


def coverage(proto: onnx.ModelProto) -> tuple[dict[str, int], Counter]:
    model = import_model(proto)
    normalize.run(model, OptimizeOptions())
    report = fuse(model, all_rules(), Target())
    fused = {g.name: sum(1 for n in g if n.op_type == "AttentionFused")
             for g in model.graph.all_graphs() if g.parent is not None}
    codes = Counter(r.code for r in report.regions
                    if r.family == "attention" and r.status != "fused")
    return fused, codes


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mask-length-repeat", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("files", nargs="*", type=Path, help="default: the shipped merged decoders")
    args = ap.parse_args()
    rows = []
    for path in args.files or FILES:
        proto = onnx.load(str(path))
        layers = sum(1 for o in proto.graph.output if o.name.endswith(".key"))
        variants = [("as exported", proto)]
        if args.mask_length_repeat:
            edited = onnx.ModelProto()
            edited.CopyFrom(proto)
            if repeat_from_mask_length(edited):
                variants.append(("repeat from mask length", edited))
        for label, p in variants:
            fused, codes = coverage(p)
            branches = list(fused.items())
            rows.append((path.name, label, branches, layers, dict(codes)))
    if args.markdown:
        print("| file | graph | attention fused per branch (of layers) | refused |")
        print("|---|---|---|---|")
    for name, label, branches, layers, codes in rows:
        per = ", ".join(f"{b} {n}/{layers}" for b, n in branches)
        refused = ", ".join(f"{c} {k}" for c, k in codes.items()) or "-"
        print(f"| {name} | {label} | {per} | {refused} |" if args.markdown
              else f"{name:32} {label:24} {per:40} {refused}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
