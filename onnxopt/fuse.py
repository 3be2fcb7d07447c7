"""The fuse stage (match → legality → rewrite) as the pipeline calls it."""

from __future__ import annotations

from onnxopt.ir.model import Model
from onnxopt.legality.target import make_target
from onnxopt.match.driver import FusionReport, fuse
from onnxopt.options import OptimizeOptions
from onnxopt.rules import all_rules


def selected_rules(options: OptimizeOptions):
    rules = all_rules()
    names = {r.name for r in rules}
    for name in set(options.only) | set(options.disable):
        if name not in names:
            from onnxopt.errors import UsageError

            raise UsageError(f"unknown rule '{name}' (rules: {', '.join(sorted(names))})")
    if options.only:
        rules = [r for r in rules if r.name in options.only]
    return [r for r in rules if r.name not in options.disable]


def run(model: Model, options: OptimizeOptions) -> FusionReport | None:
    if not options.fuse:
        return None
    target = make_target(options.target, determinism=options.determinism,
                         ort_version=options.ort_version, opset=options.opset)
    return fuse(model, selected_rules(options), target, debug=options.debug)
