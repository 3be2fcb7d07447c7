"""Common-subexpression elimination: compute each distinct thing once.

Why: exporters repeat themselves — TorchScript emits ``Shape(x)`` and the same
``Gather``/``Unsqueeze`` chain once per use, every layer re-creates identical
small constants (``1``, ``-1``, ``sqrt(d)``), and the dynamo exporter builds the
attention mask once per layer. Repetition hides sharing from the matcher (two
equal masks look like two different masks) and inflates use counts.

Two nodes are the same when they have the same domain, op, inputs (by
identity), attributes and recorded meaning (``sem``: a MatMul with
``transpose_b`` is not a plain MatMul). For commutative binary ops the input
order does not matter (IEEE ``a + b == b + a`` bit for bit). Nodes with
subgraphs, random ops and non-standard domains (which may have state) are left
alone. Small constants (up to 1024 elements) equal in dtype, shape and bytes
are merged too; large weights are left to the exporter's choice. Graph output
names never change: a duplicate that is a graph output is kept when
``replace_value`` refuses to rename.
"""

from __future__ import annotations

from typing import Any

from onnxopt.ir.edit import replace_value
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.semantics import COMMUTATIVE
from onnxopt.ir.tensor import LazyTensor
from onnxopt.normalize._common import STANDARD_DOMAINS
from onnxopt.rewrite.driver import PassResult

MAX_CONSTANT_ELEMENTS = 1024
_RANDOM = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                     "Multinomial", "Bernoulli", "Dropout"})


# A hand walk, not a pattern (onnxopt.rewrite.pattern): equal nodes anywhere in a graph (a table
# over the walk): not a tree below one root.
def eliminate_common_subexpressions(model: Model) -> PassResult:
    """Merge equal small constants, then equal nodes; return how many were merged."""
    count = _constants_across_scopes(model.graph)
    for graph in model.graph.all_graphs():
        count += _constants(graph)
        count += _nodes(graph)
    return PassResult(count)


def _constant_key(value) -> tuple | None:
    t = value.const
    if t.size > MAX_CONSTANT_ELEMENTS or t.dtype == "string":
        return None
    return (t.dtype, tuple(t.shape), t.numpy().tobytes())


def _constants_across_scopes(root: Graph) -> int:
    """Equal small constants held by different graphs of one model (the two branches of an
    ``If``, a ``Loop`` body and the graph around it) become one, held by the main graph, which
    every subgraph may read: otherwise each branch carries its own copy, and a kernel emitted
    in both branches of a merged decoder made the file heavier than its input. A constant that
    is its graph's output stays (ONNX Runtime refuses a subgraph output read from outside)."""
    graphs = root.all_graphs()
    if len(graphs) < 2:
        return 0
    groups: dict[tuple, list] = {}
    for graph in graphs:
        for value in graph.constants.values():
            if value.is_graph_output or (key := _constant_key(value)) is None:
                continue
            groups.setdefault(key, []).append(value)
    merged = 0
    for values in groups.values():
        if len({id(v.graph) for v in values}) < 2:
            continue  # one graph's copies: _constants merges them
        keep = next((v for v in values if v.graph is root), values[0])
        if keep.graph is not root:  # lifted, keeping its name (the scope's names are shared)
            del keep.graph.constants[keep.name]
            keep.graph = root
            root.constants[keep.name] = keep
        for value in values:
            if value is not keep:
                value.graph.replace_all_uses(value, keep)
                value.graph.remove_constant(value)
                merged += 1
    return merged


def _constants(graph: Graph) -> int:
    seen: dict[tuple, Any] = {}
    merged = 0
    for value in list(graph.constants.values()):
        key = _constant_key(value)
        if key is None:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = value
            continue
        if value.is_graph_output:
            continue
        graph.replace_all_uses(value, first)
        graph.remove_constant(value)
        merged += 1
    return merged


def _nodes(graph: Graph) -> int:
    seen: dict[tuple, Node] = {}
    merged = 0
    for node in graph:
        key = _key(node)
        if key is None:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        if all(replace_value(graph, dup, keep) for dup, keep in zip(node.outputs, first.outputs)):
            graph.remove(node)
            merged += 1
    return merged


def _key(node: Node) -> tuple | None:
    if node.domain not in STANDARD_DOMAINS or node.op_type in _RANDOM or node.subgraphs():
        return None
    inputs = tuple(id(v) if v is not None else None for v in node.inputs)
    if node.op_type in COMMUTATIVE and len(inputs) == 2 and None not in inputs:
        inputs = tuple(sorted(inputs))
    try:
        attrs = tuple(sorted((name, _hashable(a.value)) for name, a in node.attrs.items()))
        sem = tuple(sorted((k, _hashable(v)) for k, v in node.sem.items()))
        key = (node.domain or "", node.op_type, node.overload, inputs, attrs, sem,
               len(node.outputs))
        hash(key)
    except TypeError:
        return None
    return key


def _hashable(value: Any) -> Any:
    if isinstance(value, LazyTensor):
        if value.size > MAX_CONSTANT_ELEMENTS or value.dtype == "string":
            return ("tensor", id(value))
        return ("tensor", value.dtype, tuple(value.shape), value.numpy().tobytes())
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "proto":
        return ("proto", value[1].SerializeToString())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, float):
        return ("float", repr(value))  # keeps -0.0 apart from 0.0 and makes NaN equal to NaN
    return value
