"""What a run did that can be held back, and the search for the least that must be.

Shared by the safeguard (a result that fails the output checks) and ``--bisect`` (a
result that fails verification): both re-run the pipeline with *units* held back —
a :class:`~onnxopt.options.FusionUnit` (one fusion region), a
:class:`~onnxopt.options.PassUnit` (a normalization pass; passes work on the whole model
and cannot be switched off per region), a :class:`~onnxopt.options.RuleUnit` — and look
for the smallest set whose holding back makes the result good.
"""

from __future__ import annotations

from collections.abc import Callable

from onnxopt.fuse import MatchStatus, Region, selected_rules
from onnxopt.normalize import pass_names
from onnxopt.options import FusionUnit, HoldUnit, OptimizeOptions, PassUnit, RuleUnit
from onnxopt.pipeline import OptimizeResult


def units_of(result: OptimizeResult | None, options: OptimizeOptions) -> list[HoldUnit]:
    """What ``result``'s run did, fusion regions first; after a stage raised (no result),
    every rule and every pass."""
    if result is None:
        return ([RuleUnit(r.name) for r in selected_rules(options)]
                + [PassUnit(name) for name in pass_names()])
    stages = result.report.stages
    fused = stages.get("fuse")
    regions = fused.regions if fused is not None else []
    units: list[HoldUnit] = [unit_of(r) for r in regions if r.status == MatchStatus.FUSED]
    changed = {name for stage in ("normalize", "cleanup") for name in (stages.get(stage) or {})}
    units.extend(PassUnit(name) for name in pass_names() if name in changed)
    return units


def fused_regions(result: OptimizeResult | None) -> dict[FusionUnit, Region]:
    """The fused regions of ``result``'s run, by the unit that holds each back."""
    fused = result.report.stages.get("fuse") if result is not None else None
    regions = fused.regions if fused is not None else []
    return {unit_of(r): r for r in regions if r.status == MatchStatus.FUSED}


def unit_of(region: Region) -> FusionUnit:
    """The unit that holds ``region`` back."""
    return FusionUnit(region.rule, region.root)


def minimal_hold(units: list[HoldUnit], good: Callable[[list[HoldUnit]], bool],
                 kept_by: dict[HoldUnit, list[HoldUnit]] | None = None) -> list[HoldUnit]:
    """Give units back in halves while the result stays good; return those still held.

    Starts from everything held (known good). A half whose release keeps the result
    good is released at once; one that does not is split, down to single units. One
    culprit among n units costs about 2·log2(n) runs. ``kept_by``, where given, is filled
    with the evidence for each unit still held: the hold whose run, with that unit alone
    given back, was not good (its problem is why the unit stays held).
    """
    held = list(units)

    def release(group: list[HoldUnit]) -> None:
        if not group:
            return
        trial = [u for u in held if u not in group]
        if good(trial):
            held[:] = trial
            return
        if len(group) == 1:
            if kept_by is not None:
                kept_by[group[0]] = trial
            return
        mid = len(group) // 2
        release(group[:mid])
        release(group[mid:])

    release(list(held))
    return held
