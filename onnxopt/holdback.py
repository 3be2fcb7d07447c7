"""What a run did that can be held back, and the search for the least that must be.

Shared by the safeguard (a result that fails the output checks) and ``--bisect`` (a
result that fails verification): both re-run the pipeline with *units* held back —
``fuse:RULE@ROOT`` (one fusion region), ``pass:NAME`` (a normalization pass; passes
work on the whole model and cannot be switched off per region), ``rule:NAME`` — and
look for the smallest set whose holding back makes the result good.
"""

from __future__ import annotations

from collections.abc import Callable

from onnxopt.fuse import selected_rules
from onnxopt.normalize import pass_names
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import OptimizeResult


def units_of(result: OptimizeResult | None, options: OptimizeOptions) -> list[str]:
    """What ``result``'s run did, fusion regions first; after a stage raised (no result),
    every rule and every pass."""
    if result is None:
        return ([f"rule:{r.name}" for r in selected_rules(options)]
                + [f"pass:{name}" for name in pass_names()])
    stages = result.report.stages
    fused = stages.get("fuse")
    regions = fused.regions if fused is not None else []
    units = [f"fuse:{r.rule}@{r.root}" for r in regions if r.status == "fused"]
    changed = {name for stage in ("normalize", "cleanup") for name in (stages.get(stage) or {})}
    units.extend(f"pass:{name}" for name in pass_names() if name in changed)
    return units


def minimal_hold(units: list[str], good: Callable[[list[str]], bool],
                 kept_by: dict[str, list[str]] | None = None) -> list[str]:
    """Give units back in halves while the result stays good; return those still held.

    Starts from everything held (known good). A half whose release keeps the result
    good is released at once; one that does not is split, down to single units. One
    culprit among n units costs about 2·log2(n) runs. ``kept_by``, where given, is filled
    with the evidence for each unit still held: the hold whose run, with that unit alone
    given back, was not good (its problem is why the unit stays held).
    """
    held = list(units)

    def release(group: list[str]) -> None:
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


def describe(unit: str) -> str:
    """A held-back unit in words."""
    kind, _, what = unit.partition(":")
    if kind == "fuse":
        rule, _, root = what.partition("@")
        return f"rule {rule} at node {root}"
    if kind == "pass":
        return (f"normalization pass {what} (switched off for the whole model: a pass cannot "
                "be switched off per region)")
    return f"rule {what} (everywhere)"
