"""What a fusion rule is, and the builder its rewrite uses.

A rule reads top to bottom: the rewrite in arrow form (its docstring's first
line), ``pattern``, ``legal`` (``None`` or a sentence), ``rewrite``. The
driver checks the shared predicate — no intermediate of the match may be read
outside it — before calling ``legal``.
"""

from __future__ import annotations

from typing import ClassVar

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.value import Value
from onnxopt.legality.target import Target
from onnxopt.match.pattern import Builder, Match, Pat


class Rule:
    """Base class of fusion rules."""

    name: ClassVar[str] = ""
    root: ClassVar[str | tuple[str, ...]] = ""  # the op type(s) a match can end at
    fused_op: ClassVar[str] = ""

    def begin(self, model) -> None:
        """Called once per run before matching (rules that analyse the model keep it)."""

    def pattern(self, p: Builder) -> Pat:  # pragma: no cover - abstract
        raise NotImplementedError

    def legal(self, m: Match, target: Target) -> str | None:
        return None

    def rewrite(self, b: NodeBuilder, m: Match) -> Value | list[Value]:  # pragma: no cover
        raise NotImplementedError

    def describe(self, m: Match) -> str:
        """One line for explain: what the match is (override to add attributes)."""
        return f"{len(m.nodes)} nodes"
