"""The safeguard: nothing is written that is less fit than the input.

Every result is checked before it is saved (:mod:`onnxopt.verification.loadable`:
the ONNX checker, ONNX Runtime's own load, tensor bytes), each check only where the
input passes it. A result that fails — or a stage that raised — is not written;
instead the run is repeated with parts of it held back until the result passes:

1. the *units* of the failed run are listed (:mod:`onnxopt.holdback`): every fusion
   region it made (``fuse:RULE@ROOT``) and every normalization pass that changed
   something (``pass:NAME``); after a stage raised, every rule and every pass;
2. the run with all of them held back must pass (else: the pure round trip,
   else the input exactly as it was);
3. then units are given back in halves, keeping each half that still passes,
   until what stays held back is as small as this search finds (a few runs for
   one culprit among many units).

The report says what was held back and why, and ``optimize`` prints it: the
user gets the most optimized model that is still fit, never a broken one.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

from onnx import ModelProto

from onnxopt import evaluation
from onnxopt.exporter.save import StagedFile
from onnxopt.fuse import HELD_BACK, HELD_BACK_CODE, FusionReport, MatchStatus, Region
from onnxopt.holdback import fused_regions, minimal_hold, unit_of, units_of
from onnxopt.importer.load import (
    has_external_data,
    map_model_file,
    read_model_proto,
    read_model_with_data,
    tensor_bytes,
)
from onnxopt.options import FusionUnit, HoldUnit, OptimizeOptions, PassUnit, RuleUnit
from onnxopt.pipeline import (
    Explanation,
    OptimizeResult,
    Progress,
    StageFailure,
    explain_model,
    run_pipeline,
)
from onnxopt.verification import loadable
from onnxopt.verification.loadable import Fitness, file_fitness, fitness, serialized_parts

Attempt = tuple["OptimizeResult | None", list[str]]


def optimize_guarded(source: str | ModelProto, options: OptimizeOptions,
                     progress: Progress | None = None,
                     stage: Callable[[list[bytes]], StagedFile] | None = None) -> OptimizeResult:
    """:func:`onnxopt.pipeline.run_pipeline`, with the safeguard around it. ``stage`` writes
    the first result's bytes beside the output, and its checks load that file; a result that
    passes carries it (``staged``) for the writer to put in place, one that fails does not.

    Where something was held back, the report's ``safeguard`` entry lists what was lost
    (``lost``: :func:`loss`, one entry per unit held back and one per fusion the result lost
    with them) and the fusion report of the result says so, with the reason, at each region
    it did not fuse for that."""
    guard = _Guard(source, options, stage)
    first, problems = guard.attempt(frozenset(), progress)
    if not problems:
        unchecked = guard.unchecked.get(frozenset())
        first.report.stages["safeguard"] = {
            "checks": f"not loaded: {unchecked}" if unchecked else "passed"}
        return first
    if progress is not None:
        progress("safeguard")  # the runs that hold parts back
    start = time.perf_counter()
    units = units_of(first, options)
    result, held, fallback = guard.search(units)
    reasons = {unit: guard.reason(unit, problems[0]) for unit in held}
    lost = _losses(first, result, units, held, reasons, fallback)
    _say_held_back(result, first, reasons, lost)
    result.report.stage_seconds["safeguard"] = time.perf_counter() - start
    result.report.stages["safeguard"] = {
        "checks": "failed, then passed" if fallback != "original" else "failed",
        "problem": problems[0], "held_back": sorted(str(unit) for unit in held),
        "fallback": fallback, "lost": lost}
    return result


def explain_guarded(source: str | ModelProto, options: OptimizeOptions,
                    rule: str | None = None) -> Explanation:
    """``onnxopt explain``: the run ``optimize`` makes, safeguard and all (nothing is written),
    told region by region (:func:`onnxopt.pipeline.explain_model`). Run without the
    safeguard, explain said "fused" of regions that ``optimize`` then held back."""
    return explain_model(optimize_guarded(source, options), rule)


def loss(unit: HoldUnit, reason: str, region: Region | None = None, *, held_back: bool = True
         ) -> dict:
    """What holding ``unit`` back lost, for the report: ``unit`` (as printed), ``kind``
    ("fusion": one region of a rule; "pass": a normalization pass, for the whole model;
    "rule": every region of a rule), ``rule`` and ``root`` (the node the region ends at) where
    they apply, ``pass``, ``lost`` (in words), ``reason`` (the problem the result had with it)
    and ``held_back``: ``False`` for a fusion that was not itself held back, lost as another
    unit was (a pass its match needs)."""
    entry = {"unit": str(unit), "kind": unit.kind, "rule": None, "root": None, "pass": None,
             "lost": unit.describe(), "reason": reason, "held_back": held_back}
    if isinstance(unit, FusionUnit):
        entry["rule"], entry["root"] = unit.rule, unit.root
        size = f" ({region.nodes} nodes)" if region is not None and region.nodes else ""
        entry["lost"] = f"the {unit.rule} fusion at node {unit.root}{size}"
    elif isinstance(unit, PassUnit):
        entry["pass"] = unit.name
    else:
        entry["rule"] = unit.name
    return entry


def _losses(first: OptimizeResult | None, result: OptimizeResult, units: list[HoldUnit],
            held: frozenset[HoldUnit], reasons: dict[HoldUnit, str], fallback: str
            ) -> list[dict]:
    """Each unit held back, then each fusion of the first run that the result lacks though its
    own unit was given back (a held-back pass or rule kept it from matching)."""
    made = fused_regions(first)
    lost = [loss(unit, reasons[unit], made.get(unit)) for unit in units if unit in held]
    kept = fused_regions(result) if fallback == "partial" else {}
    wider = [unit for unit in units if unit in held and not isinstance(unit, FusionUnit)]
    for unit, region in made.items():
        if unit in held or unit in kept:
            continue
        because = "; ".join(f"{w.describe()} was held back: {reasons[w]}" for w in wider)
        lost.append(loss(unit, f"not fused once {because}" if because else
                         "not fused in the run the safeguard kept", region, held_back=False))
    return lost


def safeguard_lines(summary: dict) -> list[str]:
    """The report's ``safeguard:`` lines: nothing where the checks passed; else what was held
    back, grouped by rule and reason ("held back 12 attention fusions (rule attention): ONNX
    Runtime cannot load it: ..."), and what was written instead where nothing could be kept."""
    checks = str(summary.get("checks", ""))
    if checks == "passed":
        return []
    if checks.startswith("not loaded"):
        return [f"safeguard: {checks}"]
    lost = summary.get("lost", [])
    groups: dict[tuple[str, str | None, str], list[dict]] = {}
    for entry in lost:
        key = (entry["kind"], entry["rule"] if entry["kind"] == "fusion" else entry["unit"],
               entry["reason"])
        groups.setdefault(key, []).append(entry)
    lines = []
    for (kind, rule, reason), entries in groups.items():
        if kind == "fusion":
            n = len(entries)
            what = f"{n} {rule} fusion{'s' if n > 1 else ''} (rule {rule})"
        else:
            what = entries[0]["lost"]
        lines.append(f"safeguard: held back {what}: {reason}")
    fallback = summary.get("fallback")
    if fallback == "round trip":
        lines.append("safeguard: wrote the model without any rewrite (a plain round trip): "
                     f"{summary.get('problem')}")
    elif fallback == "original":
        lines.append(f"safeguard: wrote the input unchanged: {summary.get('problem')}")
    return lines


def _say_held_back(result: OptimizeResult, first: OptimizeResult | None,
                   reasons: dict[HoldUnit, str], lost: list[dict]) -> None:
    """Make ``result``'s fusion report say why each region it lost was not fused. A fallback
    without fusion (the round trip, the input as it was) has none of its own: the first run's
    regions stand for it, each that was fused now held back."""
    fused = result.report.stages.get("fuse")
    if fused is None:
        if first is None or first.report.stages.get("fuse") is None:
            return
        fused = FusionReport([dataclasses.replace(r) for r in first.report.stages["fuse"].regions])
        result.report.stages["fuse"] = fused
        for r in fused.regions:
            if r.status == MatchStatus.FUSED:
                r.status, r.detail, r.code = MatchStatus.REFUSED, HELD_BACK, HELD_BACK_CODE
    # (a fusion lost without being held back itself: always a region, with its rule and root)
    knock_on = {FusionUnit(e["rule"], e["root"]): e["reason"] for e in lost if not e["held_back"]}
    for r in fused.regions:
        unit = unit_of(r)
        if r.status == MatchStatus.REFUSED and r.code == HELD_BACK_CODE:
            reason = (reasons.get(unit) or reasons.get(RuleUnit(r.rule))
                      or next(iter(reasons.values()), None))
            if reason:
                r.detail = f"held back by the safeguard: with this fusion, {reason}"
        elif r.status != MatchStatus.FUSED and unit in knock_on:
            r.detail = f"{r.detail} (fused before the safeguard's hold-back: {knock_on[unit]})"


class _Guard:
    def __init__(self, source: str | ModelProto, options: OptimizeOptions,
                 stage: Callable[[list[bytes]], StagedFile] | None = None) -> None:
        self.source = source
        self.options = options
        self.stage = stage
        self._baseline: Fitness | None = None
        self._tried: dict[frozenset[HoldUnit], Attempt] = {}
        # unit -> the search's run that failed without it
        self._kept_by: dict[HoldUnit, list[HoldUnit]] = {}
        self.unchecked: dict[frozenset[HoldUnit], str] = {}

    def attempt(self, hold: frozenset[HoldUnit], progress: Progress | None = None) -> Attempt:
        """The pipeline with ``hold`` held back, and what the checks found (empty: fit)."""
        if hold in self._tried:
            return self._tried[hold]
        options = dataclasses.replace(self.options, hold_back=self.options.hold_back | hold)
        try:
            # The input's unchanged weights stay out of the result's proto: its bytes are put
            # together from their encodings (serialized_parts), and what hands the proto on
            # takes it whole (OptimizeResult.whole_proto).
            result = run_pipeline(self.source, options, progress, keep_left_out=True)
        except StageFailure as e:
            outcome: Attempt = (None, [str(e)])
        else:
            size = tensor_bytes(result.proto, result.external, left_out=result.left_out)
            small = size <= loadable.CHECKED_FROM_BYTES_MAX
            # Serialized once: the first result's pieces are written beside the output and the
            # checks load that file (the writer then only renames it); a small result of the
            # search is checked from its bytes, joined; a larger one through its stand-in copy
            # (onnxopt.verification.stand_in), whatever its size.
            layout: dict = {}  # where each initializer lies in those bytes (the checks' light copy)
            staging = self.stage is not None and not hold
            parts = (serialized_parts(result.proto, result.external, encoded=result.encoded,
                                      layout=layout) if staging or small else None)
            staged = serialized = None
            if staging and parts is not None:
                if progress is not None:
                    progress("write")  # the weights' copy beside the output
                staged = self.stage(parts)
            if progress is not None:
                progress("checks")
            checked_file = staged.tmp if staged is not None and _checkable(staged.tmp) else None
            if parts is not None and checked_file is None and small:
                serialized = b"".join(parts)
            try:
                found = fitness(result.proto, result.external, serialized=serialized, size=size,
                                tensor_budget=result.model.source_tensor_bytes,
                                staged=checked_file, layout=layout, left_out=result.left_out)
            except BaseException:
                if staged is not None:
                    staged.discard()
                raise
            problems = found.problems()
            keep = not hold and not problems  # the first attempt, and it passed: written as is
            if not keep and staged is not None:
                staged.discard()
                staged = None
            # Only that attempt keeps its bytes: the search's attempts all stay in ``_tried``,
            # and each one's bytes would be another copy of the weights in memory.
            result = dataclasses.replace(result, serialized=serialized if keep else None,
                                         staged=staged)
            if found.unchecked:
                self.unchecked[hold] = found.unchecked
            if problems:
                problems = found.problems(self.baseline())
            outcome = (result, problems)
        self._tried[hold] = outcome
        return outcome

    def baseline(self) -> Fitness:
        """The input's own fitness (checker and load only), computed once, when needed: an
        input with external data loaded by path (ORT maps its weights), any other through its
        stand-in copy where it is large (:func:`fitness`)."""
        if self._baseline is None:
            if isinstance(self.source, ModelProto):
                self._baseline = fitness(self.source)
                return self._baseline
            mapped = map_model_file(self.source)
            if has_external_data(mapped.proto.graph):
                self._baseline = file_fitness(self.source)
            else:
                self._baseline = fitness(mapped.proto, left_out=mapped.raw)
        return self._baseline

    def search(self, units: list[HoldUnit]
               ) -> tuple[OptimizeResult, frozenset[HoldUnit], str]:
        everything = frozenset(units)
        result, problems = self.attempt(everything)
        if problems:
            round_trip = dataclasses.replace(self.options, fuse=False)
            plain = _Guard(self.source, round_trip)
            plain._baseline = self._baseline
            result, problems = plain.attempt(frozenset())
            if not problems:
                return result, everything, "round trip"
            return self._original(), everything, "original"
        # Fusions first: where holding back every fusion region (and no pass) is enough, the
        # search keeps to them. A pass held back loses every fusion its form enables (a
        # Transpose folded into MatMul is what attention matches), so it would pass the
        # checks with one unit held back where the culprits were fusions.
        fusions = [u for u in units if isinstance(u, FusionUnit)]
        if 0 < len(fusions) < len(units) and not self.attempt(frozenset(fusions))[1]:
            units = fusions
        held = minimal_hold(units, lambda hold: not self.attempt(frozenset(hold))[1],
                            self._kept_by)
        result, _ = self.attempt(frozenset(held))
        return result, frozenset(held), "partial"

    def reason(self, unit: HoldUnit, default: str) -> str:
        """Why ``unit`` stays held back: the first problem of the run that gave it back alone
        and failed (already made by the search), else ``default``."""
        trial = self._kept_by.get(unit)
        problems = self._tried.get(frozenset(trial))[1] if trial is not None else None
        return problems[0] if problems else default

    def _original(self) -> OptimizeResult:
        """The input as it was (the round trip's IR stands in for the model)."""

        plain = run_pipeline(self.source, dataclasses.replace(self.options, fuse=False))
        if isinstance(self.source, ModelProto):
            proto = self.source
        elif plain.model.had_external_data:
            proto = read_model_with_data(self.source)  # its weights, to be written anew
        else:
            proto = read_model_proto(self.source)
        # Another proto than the round trip's: its initializers' positions are its own.
        return dataclasses.replace(plain, proto=proto, external={}, encoded={}, left_out={},
                                   passthrough=True)


def _checkable(staged: str) -> bool:
    """Whether the checks' children can open the staged file: the checker's and ORT's C++ take
    UTF-8 paths (a folder may be named in other bytes), and a umask may leave the file
    unreadable to its owner. Otherwise the result is checked from its bytes: a path's trouble
    must not fail a good model."""
    return evaluation.native_path(staged) and os.access(staged, os.R_OK)
