"""Dead-code elimination: nodes whose results nobody reads, and unread constants.

Why: every other pass leaves debris — the Transpose a MatMul absorbed, the
shape arithmetic that folding turned into a constant, the second of two equal
subexpressions. Debris is not only waste at run time: a dead reader still
counts as a use, and "this intermediate has no other reader" is the legality
condition of most rewrites here and in the fusion rules.

One walk in reverse order removes whole dead chains (removing a node drops its
reads, which may make its producers dead before the walk reaches them). Reads
from inside subgraphs are recorded on the outer Value, so they count as uses.
Graph inputs are the model's interface and are never touched; a constant that
is a graph output stays.
"""

from __future__ import annotations

from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.rewrite.driver import PassResult


# A hand walk, not a pattern (onnxopt.rewrite.pattern): use counts over the whole graph in one
# reverse walk: what nobody reads is not a pattern.
def eliminate_dead_code(model: Model) -> PassResult:
    """Remove unread nodes and constants in every graph; return how many were removed."""
    return PassResult(_graph(model.graph))


def _graph(graph: Graph) -> int:
    removed = 0
    outputs = graph.output_set()
    for node in graph.reversed():
        if any(o.num_uses or o in outputs for o in node.outputs):
            for sub in node.subgraphs():
                removed += _graph(sub)
            continue
        graph.remove(node)  # also releases what its subgraphs read from enclosing graphs
        removed += 1
    for value in list(graph.constants.values()):
        if not value.num_uses and value not in outputs:
            graph.remove_constant(value)
            removed += 1
    return removed

