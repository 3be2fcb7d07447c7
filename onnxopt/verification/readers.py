"""Following a model's values forward to the nodes that read them, in the file's own terms.

Generated inputs need a few facts the graph shows only some nodes downstream of an input (the
table an index input gathers from, the stride of an image input's first convolution), through
ops that pass the value on unchanged in what matters (a Cast, a Reshape, a normalisation by
constants). Both walks are this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import onnx


def readers_by_value(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """For each value name, the nodes of ``graph`` that read it (once per reading input)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def reached_readers(readers: dict[str, list[onnx.NodeProto]], starts: Iterable[str],
                    passes_on: Callable[[onnx.NodeProto, str], bool]
                    ) -> Iterator[tuple[str, onnx.NodeProto]]:
    """``(value, node)`` for every node that reads a value reached from ``starts``; a node for
    which ``passes_on(node, value)`` holds carries the walk on to its outputs (and is not
    yielded). Each value is visited once."""
    frontier, seen = list(starts), set()
    while frontier:
        name = frontier.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in readers.get(name, []):
            if passes_on(node, name):
                frontier.extend(node.output)
            else:
                yield name, node
