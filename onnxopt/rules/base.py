"""What a fusion rule is.

A rule reads top to bottom: the rewrite in arrow form (its docstring's first
line), ``pattern``, ``legal``, ``rewrite``. The driver checks the shared
predicate — no intermediate of the match may be read outside it — before calling
``legal``, which answers with a :class:`~onnxopt.refusal.Refusal` (a stable code
reports group by, and the sentence ``explain`` shows), or ``None``, or the
:class:`Facts` it proved; ``rewrite`` receives those facts. A match is never
written to: what ``legal`` learns reaches ``rewrite`` only as facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.legality.target import Target
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.refusal import Refusal


@dataclass(frozen=True)
class Facts:
    """What ``legal`` proved that ``rewrite`` needs (rules subclass it with their own fields).

    ``absorbed``: nodes outside the pattern that the rewrite takes in too (a bias Add
    before an activation, a residual Add before a norm); the driver removes them with the
    match once nothing reads them.

    ``outputs``: values of the region other than the root's that stay read outside it (the
    residual sum a norm passes on): the match has several outputs. ``rewrite`` then returns
    the root's replacements followed by one for each of these, the driver replaces them
    all, and places the new nodes before the producer of the first of them (the earliest:
    its other readers follow it).
    """

    absorbed: tuple[Node, ...] = ()
    outputs: tuple[Value, ...] = ()


class Rule:
    """Base class of fusion rules.

    ``name`` is the rule's own and no other rule has it: fusion regions and the safeguard's
    hold-back units (``fuse:NAME@ROOT``, ``rule:NAME``) carry it, so each says which rule it
    is about. ``family`` is the name users know a block by: ``--only``/``--disable`` and
    ``explain --rule`` take it, the report sums regions per family, and the nodes a rule makes
    are named after it. Rules that fuse one block from different spellings share a family
    (``layer_norm``: the decomposed form and ONNX's ``LayerNormalization``); a rule alone in
    its family leaves ``family`` to be its name.
    """

    name: ClassVar[str] = ""
    root: ClassVar[str | tuple[str, ...]] = ""  # the op type(s) a match can end at

    @property
    def family(self) -> str:
        """The rule's name, unless the rule shares a family (it then sets ``family`` itself)."""
        return self.name

    def begin(self, model) -> None:
        """Called once per run before matching (rules that analyse the model keep it)."""

    def pattern(self, p: Builder) -> Pat:  # pragma: no cover - abstract
        raise NotImplementedError

    def legal(self, m: Match, target: Target) -> Refusal | Facts | None:
        """Why the match cannot be rewritten here (a :class:`Refusal`), else ``None`` or the
        facts ``rewrite`` needs."""
        return None

    def outside_use(self, m: Match, refusal: Refusal) -> Refusal | None:
        """The refusal for an intermediate of ``m`` read outside it (the driver's shared
        predicate found it): a rule that knows what that intermediate means says so in its own
        terms (a code of its own, what to do about it); by default, the predicate's own.
        ``None``: the rule's fused op outputs what is read outside (attention's
        probabilities); ``legal`` then runs and names it in its facts' ``outputs``."""
        return refusal

    def rewrite(self, b: NodeBuilder, m: Match, facts: Facts | None
                ) -> Value | list[Value]:  # pragma: no cover - abstract
        """The replacement of the match's output (a list: of each of its outputs)."""
        raise NotImplementedError

    def describe(self, m: Match, facts: Facts | None) -> str:
        """One line for explain: what the match is (override to add attributes)."""
        return f"{len(m.nodes)} nodes"
