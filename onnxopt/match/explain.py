"""``explain``: every candidate region, fused or not, with the reason when not.

It runs the same stages as ``optimize`` up to selection, so what it says is
exactly what ``optimize`` would do; nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnx import ModelProto

from onnxopt.options import OptimizeOptions


@dataclass
class Explanation:
    fusion: object  # FusionReport
    selection: object | None  # SelectReport

    def to_json(self) -> dict:
        return {"fusion": self.fusion.to_json(),
                "selection": self.selection.to_json() if self.selection else None}


def explain_model(source: str | ModelProto, options: OptimizeOptions,
                  rule: str | None = None) -> Explanation:
    from onnxopt import fuse, normalize, select
    from onnxopt.importer import import_model
    from onnxopt.match.driver import FusionReport

    model = import_model(source)
    normalize.run(model, options)
    report = fuse.run(model, options) or FusionReport()
    selection = select.run(model, options)
    if rule:
        report = FusionReport([r for r in report.regions if r.rule == rule])
        if selection is not None:
            # fused nodes are named "<rule>/<op>" by the rewrite builder
            selection.selections = [s for s in selection.selections
                                    if s.node.split("/")[0] == rule]
    return Explanation(report, selection)
