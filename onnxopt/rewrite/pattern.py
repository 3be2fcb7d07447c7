"""Normal forms said in the pattern language (:mod:`onnxopt.match.pattern`), the one the
fusion rules use.

A :class:`PatternRewrite` is a pattern, the op types its root may have, and what to do with
a match: ``apply(graph, match)`` rewrites and says whether it did. Run as a rewrite of the
driver (:func:`onnxopt.rewrite.driver.run_to_fixed_point`), it walks every graph in order —
outer graphs first, each over a snapshot of its nodes, skipping those an earlier rewrite of
the walk removed — and tries the pattern at each node of a root op. What a pattern cannot
say (an axis two reductions share, dtypes that agree) ``apply`` checks, as the fusion rules'
``legal`` does — or, where a failed check should let the pattern try its next way (another
operand order), the case's ``require`` does, inside the match's search.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import ClassVar

from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import STANDARD_DOMAINS, Node
from onnxopt.ir.semantics import COMMUTATIVE
from onnxopt.match.pattern import (
    AnyOf,
    Builder,
    Match,
    Op,
    Pat,
    Trace,
    match_pattern,
    pattern_names,
)
from onnxopt.rewrite.driver import EditLog, PassResult, listening


@dataclass(frozen=True)
class Case:
    """Where ``pattern`` matches at a standard-domain node of one of ``roots``, ``apply``.
    ``permits``: the exactness site name (:mod:`onnxopt.ir.exactness`) whose permission the
    root needs first, for a rewrite that is not bit-exact. ``require``: what a match needs
    that the pattern cannot say (dtypes agreeing across bindings); given, the match is a
    search (:func:`onnxopt.match.pattern.match_pattern` ``exhaustive``) for the first way
    the pattern fits that ``require`` approves, as is one with ``exhaustive``: a hand walk's
    nested loops over operand orders, said as a pattern."""

    pattern: Pat
    roots: tuple[str, ...]
    apply: Callable[[Graph, Match], bool]
    permits: str | None = None
    require: Callable[[Match], bool] | None = None
    exhaustive: bool = False
    names: frozenset[str] = field(init=False)
    depth: int = field(init=False)  # how many producers deep the pattern reads
    # (input index, op types) the root's inputs must be produced by: checked before matching,
    # so the common miss costs two lookups rather than a match with its failure record.
    firsts: tuple[tuple[int, frozenset[str]], ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", pattern_names(self.pattern))
        object.__setattr__(self, "depth", _depth(self.pattern))
        object.__setattr__(self, "firsts", _firsts(self.pattern))

    def may_match(self, node: Node) -> bool:
        """What a match needs of the root's producers first (a necessary condition)."""
        for k, op_types in self.firsts:
            v = node.input(k)
            producer = v.producer if v is not None else None
            if (producer is None or producer.op_type not in op_types
                    or producer.domain not in STANDARD_DOMAINS):
                return False
        return True


def case(build: Callable[[Builder], Pat], roots: tuple[str, ...],
         apply: Callable[[Graph, Match], bool], *, permits: str | None = None,
         require: Callable[[Match], bool] | None = None, exhaustive: bool = False) -> Case:
    """The case of the pattern ``build(p)`` builds."""
    return Case(build(Builder()), roots, apply, permits, require,
                exhaustive or require is not None)


@dataclass(frozen=True)
class PatternRewrite:
    """A normal form: its cases, tried in one walk. At each node every case whose roots
    include its op is tried in turn (while the node is still there), so a node that two
    cases rewrite (a MatMul absorbing a Transpose on either side) takes both in one walk."""

    cases: tuple[Case, ...]
    # The driver gives it the nodes edits touched since it last began (``around``).
    incremental: ClassVar[bool] = True

    @classmethod
    def of(cls, *cases: Case) -> PatternRewrite:
        return cls(cases)

    def __call__(self, model: Model, around: list[Node] | None = None) -> PassResult:
        """One walk. With ``around`` (the nodes edits touched since this rewrite last began)
        a node is tried only where it lies within reach below one of them, or below what
        the walk's own edits touch: elsewhere nothing a match reads has changed since it
        last failed there (a match reads the pattern's nodes, their use counts, and the
        facts of the values at its leaves, whose producers are one step further)."""
        by_op: dict[str, list[Case]] = {}
        for c in self.cases:
            for op in c.roots:
                by_op.setdefault(op, []).append(c)
        reach = 1 + max(c.depth for c in self.cases)
        graphs = model.graph.all_graphs()
        if around is not None and len(around) * reach >= sum(len(g) for g in graphs):
            around = None  # as good as everything: a plain walk costs less than marking
        near: dict[int, int] | None = None
        touch = None
        if around is not None:
            near = {}
            for node in around:
                _spread(node, reach, near)
            touch = EditLog()
        changed = 0
        with listening(model.graph.names, touch) if touch is not None else nullcontext():
            for graph in graphs:
                for node in list(graph):
                    cases = by_op.get(node.op_type)
                    if (cases is None or node.graph is not graph
                            or node.domain not in STANDARD_DOMAINS
                            or (near is not None and id(node) not in near)):
                        continue
                    for c in cases:
                        if node.graph is not graph:
                            break
                        if c.permits is not None and not model.exactness.permits(c.permits,
                                                                                 node):
                            continue
                        if not c.may_match(node):
                            continue
                        m = match_pattern(c.pattern, node, Trace(), c.names,
                                          exhaustive=c.exhaustive, accept=c.require)
                        if m is not None and c.apply(graph, m):
                            changed += 1
                        if touch is not None and touch.touched:
                            for touched in touch.take():
                                _spread(touched, reach, near)
        return PassResult(changed)


def _firsts(pat: Pat) -> tuple[tuple[int, frozenset[str]], ...]:
    """For a root whose operands keep their places (one that commutes may take them either
    way), the standard-domain ops each input that the pattern names ops for must come from
    (one op, or each alternative an op)."""
    if not isinstance(pat, Op) or pat.domain not in STANDARD_DOMAINS:
        return ()
    commutes = pat.commutative if pat.commutative is not None else (
        pat.op_type in COMMUTATIVE and len(pat.inputs) == 2)
    if commutes:
        return ()
    out = []
    for k, p in enumerate(pat.inputs):
        options = p.alternatives if isinstance(p, AnyOf) else (p,)
        if all(isinstance(o, Op) and o.domain in STANDARD_DOMAINS for o in options):
            out.append((k, frozenset(o.op_type for o in options)))
    return tuple(out)


def _depth(pat: Pat) -> int:
    """How many producers deep ``pat`` reads from its root (a lone node: 1)."""
    if isinstance(pat, Op):
        return 1 + max((_depth(p) for p in pat.inputs), default=0)
    if isinstance(pat, AnyOf):
        return max((_depth(p) for p in pat.alternatives), default=0)
    return 0


def _spread(start: Node, reach: int, near: dict[int, int]) -> None:
    """Mark ``start`` and its readers, their readers, … ``reach`` steps down (``near``: node
    id -> the steps left when it was marked, so a node is walked on again only with more)."""
    if near.get(id(start), -1) >= reach:
        return
    frontier = [start]
    for budget in range(reach, -1, -1):
        below: list[Node] = []
        for node in frontier:
            key = id(node)
            if near.get(key, -1) >= budget:
                continue
            near[key] = budget
            if budget:
                for out in node.outputs:
                    for reader, _ in out._uses:
                        below.append(reader)
        frontier = below
