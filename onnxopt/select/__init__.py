"""Stage 6: bind every fused op to the best legal kernel and emit its final form."""

from __future__ import annotations

from onnxopt.ir.edit import replace_value
from onnxopt.ir.model import Model
from onnxopt.legality.target import make_target
from onnxopt.options import OptimizeOptions
from onnxopt.rules.base import FUSED_DOMAIN, RewriteBuilder
from onnxopt.select.registry import default_registry
from onnxopt.select.selector import Selection, select_kernel


class SelectReport:
    def __init__(self) -> None:
        self.selections: list[Selection] = []

    def chosen_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.selections:
            out[s.chosen.name] = out.get(s.chosen.name, 0) + 1
        return out

    def to_json(self) -> dict:
        return {"chosen": self.chosen_counts(), "nodes": [s.to_json() for s in self.selections]}


def run(model: Model, options: OptimizeOptions) -> SelectReport | None:
    target = make_target(options.target, determinism=options.determinism,
                         ort_version=options.ort_version, opset=options.opset)
    registry = default_registry()
    report = SelectReport()
    graph = model.graph
    for node in list(graph):
        if node.domain != FUSED_DOMAIN:
            continue
        selection = select_kernel(node, target, registry)
        report.selections.append(selection)
        b = RewriteBuilder(graph, node, f"select:{selection.chosen.name}")
        b.opset = model.opset  # emitters spell ops for it (ReduceMean's axes became an input at 18)
        outputs = selection.chosen.emit(b, node, target)
        for old, new in zip(node.outputs, outputs):
            new.dtype = new.dtype or old.dtype
            new.shape = new.shape or old.shape
            replace_value(graph, old, new)
        if not any(o.num_uses or o in graph.output_set() for o in node.outputs):
            graph.remove(node)
        for domain, version in getattr(selection.chosen, "opsets", {}).items():
            model.require_opset(domain, version)
    return report if report.selections else None
