"""Every name a model already uses, reserved before the IR names anything of its own.

A node onnxopt creates is named after its op (``Transpose``, ``Transpose_1``); a model may
already hold a node of that name (ONNX Runtime's own optimizer names nodes so), and ONNX
Runtime refuses a graph with two nodes of one name. The importer claims value names as it
meets them, but node names are met one at a time, after some nodes were already given names
of onnxopt's (a nameless node gets one), and a model-local function's or a subgraph's names
are met later still. So all of them are collected first, in one walk: node, value and graph
names of the main graph and every subgraph, and the names inside model-local functions
(which ONNX Runtime inlines into the graph).
"""

from __future__ import annotations

from collections.abc import Iterator

from onnx import AttributeProto, GraphProto, ModelProto


def names_in_use(proto: ModelProto) -> set[str]:
    """The names ``proto`` uses anywhere (nodes, values, graphs, functions)."""
    names = names_in_graph(proto.graph)
    for f in proto.functions:
        names.add(f.name)
        names.update(f.input)
        names.update(f.output)
        for node in f.node:
            names.add(node.name)
            names.update(node.output)
            for sub in _subgraphs(node):
                names.update(names_in_graph(sub))
    names.discard("")
    return names


def names_in_graph(graph: GraphProto) -> set[str]:
    """The names one graph and its subgraphs use."""
    names: set[str] = set()
    for g in _graphs(graph):
        names.add(g.name)
        names.update(vi.name for vi in (*g.input, *g.output, *g.value_info))
        names.update(t.name for t in g.initializer)
        for node in g.node:
            names.add(node.name)
            names.update(node.output)
    return names


def _graphs(graph: GraphProto) -> Iterator[GraphProto]:
    stack = [graph]
    while stack:
        g = stack.pop()
        yield g
        for node in g.node:
            stack.extend(_subgraphs(node))


def _subgraphs(node) -> list[GraphProto]:
    out: list[GraphProto] = []
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out
