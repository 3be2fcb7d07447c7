"""What a user can ask of the optimizer, in one place shared by the CLI and the API."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OptimizeOptions:
    """Options of one optimization run.

    ``target`` is ``"cpu"``, ``"cuda"`` or ``None`` (probe the machine).
    ``only``/``disable`` switch fusion rules by name; ``fuse=False`` rewrites
    nothing at all (import and export only). ``debug`` runs the IR
    verifier after every pass and makes rule bookkeeping errors fatal.
    """

    target: str | None = None
    only: frozenset[str] = field(default_factory=frozenset)
    disable: frozenset[str] = field(default_factory=frozenset)
    opset: int | None = None
    ort_version: str | None = None
    determinism: str = "relaxed"
    tune: bool = False
    tune_cache: str | None = None
    fuse: bool = True
    debug: bool = False
