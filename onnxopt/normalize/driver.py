"""Running normalization passes to a fixed point.

A pass is a function ``(model) -> int`` returning how many changes it made.
The driver repeats the whole list until a round changes nothing, at most
``MAX_ROUNDS`` times (a pass pair that undoes each other must not hang the
tool), and under ``debug`` verifies the IR after every pass.
"""

from __future__ import annotations

from collections.abc import Callable

from onnxopt.ir.model import Model
from onnxopt.ir.verifier import verify_graph

Pass = Callable[[Model], int]
MAX_ROUNDS = 8

PASSES: list[tuple[str, Pass]] = []


def run_passes(model: Model, *, debug: bool = False,
               passes: list[tuple[str, Pass]] | None = None) -> dict[str, int]:
    passes = PASSES if passes is None else passes
    counts: dict[str, int] = {name: 0 for name, _ in passes}
    for _round in range(MAX_ROUNDS):
        changed = 0
        for name, fn in passes:
            n = fn(model)
            counts[name] += n
            changed += n
            if debug:
                verify_graph(model.graph)
        if not changed:
            break
    return {k: v for k, v in counts.items() if v}
