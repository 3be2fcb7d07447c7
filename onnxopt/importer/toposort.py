"""Node order for import, and the structural errors found while computing it.

ONNX requires nodes in topological order, but files in the wild sometimes are
not; importing sorts them when needed (Kahn's algorithm, linear time) and
reports the graphs that cannot be sorted: a name that nothing produces, a name
produced twice, a cycle. A node that owns subgraphs also depends on the outer
values its subgraphs read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from onnx import AttributeProto, GraphProto, NodeProto

from onnxopt.errors import ModelError
from onnxopt.ir.node import STANDARD_DOMAINS


def topological_order(g: GraphProto, lookup: Callable[[str], object], label: str
                      ) -> list[tuple[int, NodeProto]]:
    """``(index in g.node, node)`` in an order where every node follows what it reads."""
    every = list(g.node)
    kept = _without_shadowed_constants(every, label)
    nodes = [every[i] for i in kept]
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for out in n.output:
            if out:
                producer[out] = i
    deps: list[list[int]] = []
    in_order = True
    for i, n in enumerate(nodes):
        mine: list[int] = []
        for name in _reads(n):
            j = producer.get(name)
            if j is None:
                if lookup(name) is None:
                    raise ModelError(f"{label}: node '{_label(n)}' reads '{name}', which nothing "
                                     "produces (dangling input)")
                continue
            if j == i:
                raise ModelError(f"{label}: node '{_label(n)}' reads its own output '{name}' "
                                 "(cycle)")
            mine.append(j)
            if j > i:
                in_order = False
        deps.append(mine)
    if in_order:
        return [(kept[i], n) for i, n in enumerate(nodes)]
    return [(kept[i], n) for i, n in _kahn(nodes, deps, label)]


def _without_shadowed_constants(nodes: list[NodeProto], label: str) -> list[int]:
    """Indices of the nodes that count: a name produced twice is an error, except between
    Constant nodes, where ONNX Runtime takes the latest (as it does for initializers)."""
    producer: dict[str, int] = {}
    dropped: set[int] = set()
    for i, n in enumerate(nodes):
        for out in n.output:
            if not out:
                continue
            j = producer.get(out)
            if j is not None:
                if not (_is_constant(n) and _is_constant(nodes[j])):
                    raise ModelError(f"{label}: duplicate output name '{out}' (produced by two "
                                     f"nodes: '{_label(nodes[j])}' and '{_label(n)}')")
                dropped.add(j)
            producer[out] = i
    return [i for i in range(len(nodes)) if i not in dropped]


def _is_constant(n: NodeProto) -> bool:
    return n.op_type == "Constant" and n.domain in STANDARD_DOMAINS and len(n.output) == 1


def _kahn(nodes: list[NodeProto], deps: list[list[int]], label: str
          ) -> list[tuple[int, NodeProto]]:
    users: list[list[int]] = [[] for _ in nodes]
    pending = [0] * len(nodes)
    for i, mine in enumerate(deps):
        for j in set(mine):
            users[j].append(i)
            pending[i] += 1
    ready = deque(i for i, c in enumerate(pending) if c == 0)
    order: list[int] = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                ready.append(u)
    if len(order) != len(nodes):
        stuck = next(nodes[i] for i, c in enumerate(pending) if c > 0)
        raise ModelError(f"{label}: the graph has a cycle through node '{_label(stuck)}'")
    return [(i, nodes[i]) for i in order]


def _reads(n: NodeProto) -> list[str]:
    if _is_constant(n):
        return []  # ONNX Runtime turns Constant nodes into initializers before anything reads
    names = [x for x in n.input if x]
    for a in n.attribute:
        subs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
        for sub in subs:
            names.extend(free_names(sub))
    return names


def reads_of(g: GraphProto) -> set[str]:
    """Every name the graph's nodes read (its subgraphs' outer reads included) or output."""
    names = {o.name for o in g.output}
    for n in g.node:
        names.update(_reads(n))
    return names


def free_names(g: GraphProto) -> list[str]:
    """Names a subgraph reads but does not define (its implicit inputs)."""
    defined = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    defined |= {t.values.name for t in g.sparse_initializer}
    free: list[str] = []
    for n in g.node:
        for name in _reads(n):
            if name not in defined:
                free.append(name)
        defined.update(o for o in n.output if o)
    return free


def _label(n: NodeProto) -> str:
    return n.name or f"{n.op_type}->{','.join(n.output)}"
