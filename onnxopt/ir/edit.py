"""Edits that every stage shares (normalization, fusion, kernel binding), built on Graph's
primitive operations.

The one subtle case is a value that is a graph output: the model's interface
(output names) must not change, so replacing it either renames the
replacement (when nothing else would notice) or refuses.
"""

from __future__ import annotations

from onnxopt.ir.exactness import record
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value


def replace_value(graph: Graph, old: Value, new: Value, *, inexact: str | None = None) -> bool:
    """Make every reader of ``old`` read ``new``; keep graph output names. Returns success.

    When ``old`` is a graph output, ``new`` takes over its name — allowed only
    if ``new`` is produced by a node of this graph and is itself neither a
    graph input, a constant nor another graph output.

    ``inexact`` names the rewrite (:func:`onnxopt.ir.exactness.site`) when ``new`` equals
    ``old`` only up to rounding: it is recorded on ``new`` (see :mod:`onnxopt.ir.exactness`).
    """
    if old is new:
        return True
    if inexact is not None:
        record(new, (inexact,))
    if old.graph is graph and old in graph.output_set():
        if (new.producer is None or new.graph is not graph or new in graph.output_set()
                or new.is_constant):
            return False
        graph.replace_all_uses(old, new, outputs=True)
        rename(graph, new, old.name)
        old.name = graph.names.fresh(old.name + "_replaced")
        if old.dtype and not new.dtype:
            new.dtype = old.dtype
        if old.shape is not None:
            new.shape = old.shape
        return True
    graph.replace_all_uses(old, new)
    return True


def rename(graph: Graph, value: Value, name: str) -> None:
    """Give ``value`` a name (that its previous holder gives up)."""
    graph.names.taken.add(name)
    if value.is_constant and value.name in graph.constants:
        del graph.constants[value.name]
        graph.constants[name] = value
    value.name = name


def remove_if_dead(graph: Graph, *nodes: Node | None) -> int:
    """Remove each of ``nodes`` none of whose outputs is read or is a graph output; return how
    many were removed (truthy when one was).

    The one dead-node remover every stage uses. Give a rewrite's leftovers readers first (the
    old root, then what fed it): removing one can leave the next unread. A node no longer in
    ``graph`` (an earlier step removed it) and ``None`` (no such node) are skipped."""
    outputs = graph.output_set()
    removed = 0
    for node in nodes:
        if node is None or node.graph is not graph:
            continue
        if any(o.num_uses or o in outputs for o in node.outputs):
            continue
        graph.remove(node)
        removed += 1
    return removed
