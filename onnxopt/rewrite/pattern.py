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
class PatternRewrite:
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

    @classmethod
    def of(cls, build: Callable[[Builder], Pat], roots: tuple[str, ...],
           apply: Callable[[Graph, Match], bool], *, permits: str | None = None
           ) -> PatternRewrite:
        """The rewrite of the pattern ``build(p)`` builds."""
        return cls(build(Builder()), roots, apply, permits)

    def __call__(self, model: Model) -> PassResult:
        changed = 0
        for graph in model.graph.all_graphs():
            for node in list(graph):
                if (node.graph is not graph or node.op_type not in self.roots
                        or node.domain not in STANDARD_DOMAINS):
                    continue
                if self.permits is not None and not model.exactness.permits(self.permits, node):
                    continue
                m = match_pattern(self.pattern, node, Trace(), self.names)
                if m is not None and self.apply(graph, m):
                    changed += 1
        return PassResult(changed)


def in_turn(*rewrites: Callable[[Model], PassResult]) -> Callable[[Model], PassResult]:
    """One pass made of several rewrites, each over the whole model in turn."""
    def run(model: Model) -> PassResult:
        total = PassResult()
        for rewrite in rewrites:
            total = total + rewrite(model)
        return total
    return run
