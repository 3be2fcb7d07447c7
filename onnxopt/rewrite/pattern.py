"""Normal forms said in the pattern language (:mod:`onnxopt.match.pattern`), the one the
fusion rules use.

A :class:`PatternRewrite` is a pattern, the op types its root may have, and what to do with
a match: ``apply(graph, match)`` rewrites and says whether it did. Run as a rewrite of the
driver (:func:`onnxopt.rewrite.driver.run_to_fixed_point`), it walks every graph in order —
outer graphs first, each over a snapshot of its nodes, skipping those an earlier rewrite of
the walk removed — and tries the pattern at each node of a root op. What a pattern cannot
say (a value read by one reader alone, an axis two reductions share) ``apply`` checks, as
the fusion rules' ``legal`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import STANDARD_DOMAINS
from onnxopt.match.pattern import Builder, Match, Pat, Trace, match_pattern, pattern_names
from onnxopt.rewrite.driver import PassResult


@dataclass(frozen=True)
class Case:
    """Where ``pattern`` matches at a standard-domain node of one of ``roots``, ``apply``.
    ``permits``: the exactness site name (:mod:`onnxopt.ir.exactness`) whose permission the
    root needs first, for a rewrite that is not bit-exact."""

    pattern: Pat
    roots: tuple[str, ...]
    apply: Callable[[Graph, Match], bool]
    permits: str | None = None
    names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", pattern_names(self.pattern))


def case(build: Callable[[Builder], Pat], roots: tuple[str, ...],
         apply: Callable[[Graph, Match], bool], *, permits: str | None = None) -> Case:
    """The case of the pattern ``build(p)`` builds."""
    return Case(build(Builder()), roots, apply, permits)


@dataclass(frozen=True)
class PatternRewrite:
    """A normal form: its cases, tried in one walk. At each node every case whose roots
    include its op is tried in turn (while the node is still there), so a node that two
    cases rewrite (a MatMul absorbing a Transpose on either side) takes both in one walk."""

    cases: tuple[Case, ...]

    @classmethod
    def of(cls, *cases: Case) -> PatternRewrite:
        return cls(cases)

    def __call__(self, model: Model) -> PassResult:
        by_op: dict[str, list[Case]] = {}
        for c in self.cases:
            for op in c.roots:
                by_op.setdefault(op, []).append(c)
        changed = 0
        for graph in model.graph.all_graphs():
            for node in list(graph):
                cases = by_op.get(node.op_type)
                if cases is None or node.graph is not graph or node.domain not in STANDARD_DOMAINS:
                    continue
                for c in cases:
                    if node.graph is not graph:
                        break
                    if c.permits is not None and not model.exactness.permits(c.permits, node):
                        continue
                    m = match_pattern(c.pattern, node, Trace(), c.names)
                    if m is not None and c.apply(graph, m):
                        changed += 1
        return PassResult(changed)
