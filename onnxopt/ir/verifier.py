"""Invariants of the IR, checked after every pass in tests and under ``--debug``.

SSA (every value has one producer and one name), use lists that match the
nodes' inputs exactly, topological order (every input defined before it is
read, looking through enclosing graphs for subgraph reads), and shapes that
are well-formed. A violation is a bug in a pass, never in the user's model,
so it raises :class:`IRVerificationError` with the first problem found.
"""

from __future__ import annotations

from collections import Counter

from onnxopt.ir.graph import Graph
from onnxopt.ir.value import Value


class IRVerificationError(AssertionError):
    pass


def verify_graph(graph: Graph) -> None:
    """Raise :class:`IRVerificationError` on the first broken invariant."""
    _Verifier().graph(graph, set())


class _Verifier:
    def graph(self, graph: Graph, visible: set[int]) -> None:
        defined = set(visible)
        names: set[str] = set()  # per graph: sibling subgraphs may reuse a name (ONNX scoping)
        expected_uses: Counter = Counter()
        opaque = [v for v, _ in graph.opaque_initializers.values() if v is not None]
        inputs = list(dict.fromkeys(graph.inputs))  # an input may be listed twice
        for v in inputs + list(graph.constants.values()) + opaque:
            self._define(v, defined, names)
            if v.producer is not None:
                raise IRVerificationError(f"%{v.name}: graph input or constant has a producer")
        count = 0
        for node in graph:
            count += 1
            if node.graph is not graph:
                raise IRVerificationError(f"{node.name}: node.graph is not its graph")
            for i, v in enumerate(node.inputs):
                if v is None:
                    continue
                if id(v) not in defined:
                    raise IRVerificationError(
                        f"{node.name}: input {i} %{v.name} is read before it is defined "
                        "(or is not in this graph)")
                expected_uses[(id(v), id(node), i)] += 1
                if not any(n is node and k == i for n, k in v._uses):
                    raise IRVerificationError(
                        f"%{v.name}: use list lacks ({node.name}, {i})")
            for sub in node.subgraphs():
                if sub.parent is not node:
                    raise IRVerificationError(f"{node.name}: subgraph {sub.name} has wrong parent")
                self.graph(sub, defined)
            for k, out in enumerate(node.outputs):
                if out.producer is not node or out.index != k:
                    raise IRVerificationError(f"%{out.name}: producer/index do not match {node.name}")
                self._define(out, defined, names)
        if count != len(graph):
            raise IRVerificationError(f"graph {graph.name}: node count {len(graph)} != {count}")
        owners = sum(1 for node in graph if node.subgraphs())
        if owners != graph._owners:
            raise IRVerificationError(
                f"graph {graph.name}: {owners} nodes hold subgraphs, counted {graph._owners}")
        for v in graph.outputs:
            if id(v) not in defined:
                raise IRVerificationError(f"graph output %{v.name} is not defined in {graph.name}")
        self._check_use_lists(graph)

    def _define(self, v: Value, defined: set[int], names: set[str]) -> None:
        if v.name in names:
            raise IRVerificationError(f"%{v.name}: name defined twice (SSA)")
        names.add(v.name)
        defined.add(id(v))
        _check_shape(v)

    def _check_use_lists(self, graph: Graph) -> None:
        values = list(dict.fromkeys(graph.inputs)) + list(graph.constants.values())
        values.extend(v for v, _ in graph.opaque_initializers.values() if v is not None)
        for node in graph:
            values.extend(node.outputs)
        for v in values:
            for user, i in v._uses:
                if user.graph is None:
                    raise IRVerificationError(f"%{v.name}: used by removed node {user.name}")
                if i >= len(user.inputs) or user.inputs[i] is not v:
                    raise IRVerificationError(
                        f"%{v.name}: use ({user.name}, {i}) does not read it")
            if len({(id(n), i) for n, i in v._uses}) != len(v._uses):
                raise IRVerificationError(f"%{v.name}: duplicate entries in use list")


def _check_shape(v: Value) -> None:
    if v.shape is None:
        return
    if not isinstance(v.shape, tuple):
        raise IRVerificationError(f"%{v.name}: shape must be a tuple, got {type(v.shape).__name__}")
    for d in v.shape:
        if d is None or isinstance(d, str):
            continue
        if not isinstance(d, int) or isinstance(d, bool) or d < 0:
            raise IRVerificationError(f"%{v.name}: bad dimension {d!r}")
    if v.const is not None and tuple(v.const.shape) != tuple(v.shape):
        raise IRVerificationError(f"%{v.name}: constant shape {v.const.shape} != {v.shape}")
