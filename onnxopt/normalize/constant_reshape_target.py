"""A Reshape whose target is computed at run time gets a constant target where shapes say it.

    Reshape(x, Concat(Gather(Shape(x), 0), Gather(Shape(x), 1), [H], [D]))
        ->  Reshape(x, [0, 0, H, D])

Exporters compute reshape targets from ``Shape`` (TorchScript spells every head
split and merge so): a small subgraph per Reshape that ONNX Runtime evaluates
on every run, and a form the patterns would each have to see through. Where
shape inference knows the target's contents symbolically, each entry is either
a number, or provably the input's dim at the same position (``0``: "copy it",
the ONNX meaning without ``allowzero``, exact even for a dim that is 0 at
run time; a target with ``allowzero`` set and no literal zero means the same
without it), or, for at most one entry, the rest of the element count (``-1``).
A ``-1`` the model did not write is taken only when every other entry is a
positive number, so a zero-sized dim cannot make it ambiguous. Anything else keeps
its computed target. The computation left unread is dead code.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.tensor import LazyTensor
from onnxopt.normalize._common import live_ops
from onnxopt.rewrite.driver import PassResult


# A hand walk, not a pattern (onnxopt.rewrite.pattern): one Reshape and the symbolic contents
# shape inference gave its target: no producer tree.
def constant_reshape_target(model: Model) -> PassResult:
    changes = 0
    for graph, node in live_ops(model, "Reshape"):
        dims = constant_target(node)
        if dims is None:
            continue
        target = graph.add_constant(LazyTensor.from_array(np.array(dims, np.int64)),
                                    hint=node.input(1).name + "_const")
        target.sym = tuple(dims)
        graph.set_input(node, 1, target)
        node.attrs.pop("allowzero", None)  # its 0s copy (no literal zero was there)
        graph.changed(node)
        changes += 1
    return PassResult(changes)


def constant_target(node: Node) -> list[int] | None:
    """The constant target with the same meaning as ``node``'s computed one, or None."""
    x, target = node.inputs[0], node.input(1)
    if target is None or target.const is not None or target.sym is None or x is None:
        return None
    if target.dtype != "int64":
        return None
    if node.attr("allowzero", 0) and any(d == 0 for d in target.sym if isinstance(d, int)):
        return None  # a literal zero: the one thing "allowzero" changes
    rank = len(x.shape) if x.shape is not None else -1
    dims: list[int] = []
    inferred = False  # a -1 of ours, not the model's
    for i, d in enumerate(target.sym):
        if isinstance(d, int):
            dims.append(d)
        elif i < rank and sd.same(d, x.shape[i]):
            dims.append(0)  # exact even where the dim is 0 at run time: 0 copies a 0
        else:
            dims.append(-1)
            inferred = True
    if dims.count(-1) > 1:
        return None
    if inferred and any(d <= 0 for d in dims if d != -1):
        return None
    return dims
