"""Exactness: where a rewrite that is not bit for bit the model's own computation may stay.

Most rewrites compute exactly what the model did: the same ops on the same values in the
same order (dead code, common subexpressions, transposes folded into MatMul flags, a scalar
scale moved past a Reshape). Some are only mathematically equal: ``x/c`` becomes
``x·(1/c)``, a softmax spelled in five ops becomes ``Softmax``, a variance is centred. Those
differ in the last bit, and a model that rounds, floors, compares or takes an argmax turns
that bit into another answer. So a non-exact rewrite may stay only inside a region that a
rule fuses (whose numerics are the fused kernel's business anyway); everywhere else the
output must compute bit for bit what the input did.

How that is kept, in three parts:

- A non-exact rewrite is a *site* (``"canonical_scale@Div_3"``: the rewrite and the node it
  rewrote). Before it rewrites, a pass asks the run's :class:`ExactnessPolicy` whether the
  site is permitted; after, it records the site on the value that took the model's value's
  place (``Value.inexact``, via ``replace_value(..., inexact=site)``).
- Every later edit carries the sites along: a value that replaces another, or an input that
  bypasses one, takes over the sites of what it replaced and of everything that dies with it
  (:func:`dying_sites`). So an exact pass that moves or rebuilds a non-exact result (a scale
  moved past a Transpose, two equal nodes merged) keeps the record.
- After fusion, :func:`unconfined_sites` follows each recorded site forward through the
  graph, stopping at fused nodes. A site whose influence reaches a graph output without
  passing through a fused node changed what the model computes where nothing was fused.
  The driver then runs again from the imported model with those sites refused, until none
  is left (``onnxopt.pipeline``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onnxopt.ir.graph import Graph
    from onnxopt.ir.node import Node
    from onnxopt.ir.value import Value

NO_SITES: frozenset[str] = frozenset()

# How far back :func:`dying_sites` looks through a chain of nodes that die with a value: a
# rewrite replaces a handful of nodes; a longer dead chain is dead code, not a rewrite's.
_CHAIN_LIMIT = 16


def site(rewrite: str, anchor: Node) -> str:
    """The name of one non-exact rewrite: the pass (or rule) and the node it rewrote."""
    return f"{rewrite}@{anchor.name}"


def rewrite_of(site_name: str) -> str:
    """The pass (or rule) a site names."""
    return site_name.partition("@")[0]


@dataclass(frozen=True)
class ExactnessPolicy:
    """Which non-exact rewrites a run may make.

    ``inexact=False`` makes none at all (``--determinism strict``, and a run that fuses
    nothing, where no such rewrite could be confined); ``refused`` names the sites an earlier
    run found outside every fused region.
    """

    inexact: bool = True
    refused: frozenset[str] = field(default_factory=frozenset)

    def permits(self, rewrite: str, anchor: Node) -> bool:
        return self.inexact and site(rewrite, anchor) not in self.refused

    def refusing(self, sites: Iterable[str]) -> ExactnessPolicy:
        return ExactnessPolicy(self.inexact, self.refused | frozenset(sites))


def record(value: Value, sites: Iterable[str]) -> None:
    """Note on ``value`` that it holds the results of these non-exact rewrites."""
    sites = frozenset(sites)
    if not sites or sites <= value.inexact:
        return
    value.inexact = value.inexact | sites
    if value.graph is not None:
        value.graph.names.inexact_recorded = True


def dying_sites(value: Value) -> frozenset[str]:
    """The sites recorded on ``value`` and on the values that die with it.

    Called when ``value`` has just lost its readers to another value (or input): the nodes
    that computed it, and whatever they alone read, are about to be dead, and what they
    held of non-exact rewrites now lives in the replacement.
    """
    sites = set(value.inexact)
    producer = value.producer
    if producer is None or _read(producer, set()):
        return frozenset(sites)
    dying, stack = {id(producer)}, [producer]
    while stack and len(dying) <= _CHAIN_LIMIT:
        node = stack.pop()
        for v in node.inputs:
            if v is None:
                continue
            sites.update(v.inexact)
            up = v.producer
            if up is None or id(up) in dying or _read(up, dying):
                continue
            dying.add(id(up))
            stack.append(up)
    return frozenset(sites)


def _read(node: Node, dying: set[int]) -> bool:
    """Whether an output of ``node`` is read by a node outside ``dying`` (or is an output)."""
    for out in node.outputs:
        if out.is_graph_output:
            return True
        if any(id(user) not in dying for user, _ in out._uses):
            return True
    return False


def unconfined_sites(graph: Graph, fused_domain: str) -> frozenset[str]:
    """The recorded sites whose influence reaches an output of ``graph`` other than through
    a node of ``fused_domain``: non-exact rewrites that changed what the model computes
    where nothing was fused."""
    if not graph.names.inexact_recorded:
        return NO_SITES
    reach: dict[int, frozenset[str]] = {}
    _flow(graph, fused_domain, reach)
    out: set[str] = set()
    for v in graph.outputs:
        out.update(reach.get(id(v), NO_SITES))
    return frozenset(out)


def _flow(graph: Graph, fused_domain: str, reach: dict[int, frozenset[str]]) -> frozenset[str]:
    """Fill ``reach`` (value id → sites that influence it) for ``graph``'s values; return the
    sites that reach its outputs (a subgraph's: what its owner's outputs then carry)."""
    for v in [*graph.inputs, *graph.constants.values()]:
        if v.inexact:
            reach[id(v)] = v.inexact
    for node in graph:
        if node.domain == fused_domain:
            for out in node.outputs:
                reach[id(out)] = NO_SITES  # the fused op's own numbers, whatever it read
            continue
        sites: set[str] = set()
        for v in node.inputs:
            if v is not None:
                sites.update(reach.get(id(v), v.inexact))
        for sub in node.subgraphs():
            # A body reads outer values by name; whatever reaches its outputs reaches the node's.
            sites.update(_flow(sub, fused_domain, reach))
        for out in node.outputs:
            reach[id(out)] = frozenset(sites) | out.inexact
    result: set[str] = set()
    for v in graph.outputs:
        result.update(reach.get(id(v), v.inexact))
    return frozenset(result)
