"""``--bisect``: which rewrite made the optimized model compute something else?

When verification fails, the pipeline is re-run with fusion regions and passes held
back (:mod:`onnxopt.holdback`), halving the set each time, until the smallest set whose
holding back makes the result verify is found. The answer names each culprit — the
rule and the node its region ends at, or the pass (passes work on the whole model and
cannot be switched off per region) — with the error the failing model showed, and the
model optimized without the culprits, which verifies.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from onnx import ModelProto

from onnxopt.exporter.save import inline_external
from onnxopt.holdback import minimal_hold, units_of
from onnxopt.options import HoldUnit, OptimizeOptions
from onnxopt.pipeline import OptimizeResult
from onnxopt.safeguard import optimize_guarded
from onnxopt.verification import VerifyReport, verify_models


@dataclass
class BisectReport:
    """What bisection found: the mismatch it started from, the culprits, and the result
    without them (``None`` when none was found, with ``reason`` saying why) with its own
    verification (``verified``). A culprit prints as ``fuse:RULE@ROOT`` or ``pass:NAME``."""

    mismatch: list[str] = field(default_factory=list)
    culprits: list[HoldUnit] = field(default_factory=list)
    result: OptimizeResult | None = None
    runs: int = 0
    reason: str | None = None
    verified: VerifyReport | None = None

    def lines(self) -> list[str]:
        # No mismatch of its own: the model optimized anew verifies, only the reason is news.
        out = [f"bisect: the optimized model differs ({'; '.join(self.mismatch)})"
               ] if self.mismatch else []
        if self.culprits:
            out += [f"bisect: caused by {u.describe()}" for u in self.culprits]
            out.append(f"bisect: without it the model verifies ({self.runs} runs)")
        else:
            out.append(f"bisect: {self.reason}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"mismatch": self.mismatch, "culprits": [str(u) for u in self.culprits],
                "described": [u.describe() for u in self.culprits], "runs": self.runs,
                "reason": self.reason}


def bisect(source: str | ModelProto, options: OptimizeOptions,
           verify_options: dict[str, Any] | None = None, *,
           first: OptimizeResult | None = None,
           first_report: VerifyReport | None = None) -> BisectReport:
    """Find the rewrites that make ``source``'s optimized form fail verification."""
    verify_options = verify_options or {}
    runs: dict[frozenset[HoldUnit], tuple[OptimizeResult, VerifyReport]] = {}

    def attempt(hold: frozenset[HoldUnit]) -> tuple[OptimizeResult, VerifyReport]:
        if hold not in runs:
            opts = dataclasses.replace(options, hold_back=options.hold_back | hold)
            result = optimize_guarded(source, opts)
            runs[hold] = (result, verify_models(source, _in_memory(result), **verify_options))
        return runs[hold]

    if first is not None and first_report is not None:
        runs[frozenset()] = (first, first_report)
    first, report = attempt(frozenset())
    if report.ok:
        return BisectReport(result=first, runs=len(runs), verified=report,
                            reason="optimized anew, the model verifies: there is nothing to "
                                   "bisect")
    mismatch = [f"{o.name}: max abs {o.max_abs:.3g}, max rel {o.max_rel:.3g} "
                f"(tolerance {o.tolerance:g})" for o in report.outputs if not o.ok]
    units = units_of(first, options)
    if not attempt(frozenset(units))[1].ok:
        return BisectReport(mismatch, runs=len(runs), reason=(
            "the mismatch remains with every fusion and pass held back: no rewrite of "
            "onnxopt's causes it"))
    culprits = minimal_hold(units, lambda hold: attempt(frozenset(hold))[1].ok)
    without, verified = attempt(frozenset(culprits))
    return BisectReport(mismatch, culprits, without, runs=len(runs), verified=verified)


def _in_memory(result: OptimizeResult) -> ModelProto:
    if not result.external:
        return result.whole_proto()
    proto = ModelProto()
    proto.CopyFrom(result.proto)
    inline_external(proto, result.external)
    return proto
