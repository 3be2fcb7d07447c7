"""The fuse stage (match → legality → rewrite) as the pipeline calls it."""

from __future__ import annotations

from onnxopt.ir.model import Model
from onnxopt.legality.target import make_target
from onnxopt.match.driver import FusionReport, fuse
from onnxopt.options import OptimizeOptions
from onnxopt.rules import all_rules
from onnxopt.rules.base import FUSED_DOMAIN


def selected_rules(options: OptimizeOptions):
    rules = [*all_rules(), *options.extra_rules]
    names = {r.name for r in rules}
    for name in set(options.only) | set(options.disable):
        if name not in names:
            from onnxopt.errors import UsageError

            raise UsageError(f"unknown rule '{name}' (rules: {', '.join(sorted(names))})")
    if options.only:
        rules = [r for r in rules if r.name in options.only]
    return [r for r in rules if r.name not in options.disable]


MAX_ROUNDS = 3


def run(model: Model, options: OptimizeOptions) -> FusionReport | None:
    """Fuse, then settle: normalize, and fuse again while that removed fused nodes.

    A rewrite can leave the nodes it replaced alive through shape readers alone (a
    TorchScript export reads the Shape of its head-merge Transpose to build a Reshape
    target). Such a node is not used, but until normalization folds those shapes it still
    reads its inputs, and a later match that needs them alone is refused ("also used
    outside the match"). After the settle the refused regions get a second round, and
    stage 6 sees only fused nodes whose results are used.
    """
    if not options.fuse:
        return None
    from onnxopt import normalize

    target = make_target(options.target, determinism=options.determinism,
                         ort_version=options.ort_version, opset=options.opset)
    rules = selected_rules(options)
    report = fuse(model, rules, target, debug=options.debug, hold_back=options.skips_region)
    for _ in range(MAX_ROUNDS - 1):
        before = _fused_nodes(model)
        normalize.run(model, options)
        if _fused_nodes(model) == before:
            break
        again = fuse(model, rules, target, debug=options.debug, hold_back=options.skips_region)
        # Every candidate is matched again: keep the first round's fusions, and the second
        # round's word on everything (what still cannot fuse, and why).
        report.regions = [r for r in report.regions if r.status == "fused"] + again.regions
    # A partial match whose root another rule then fused (a norm pattern that started at a
    # GELU's Add) says nothing about what is left unfused.
    alive = {n.name for n in model.graph.all_nodes()}
    report.regions = [r for r in report.regions if r.status != "partial" or r.root in alive]
    return report


def _fused_nodes(model: Model) -> int:
    return sum(1 for n in model.graph.all_nodes() if n.domain == FUSED_DOMAIN)
