"""Two reshapes in a row are one: only the last target shape matters.

    Reshape(Reshape(x, s1), s2)  ->  Reshape(x, s2)

A Reshape never moves data, it only renames the layout, so the intermediate
shape is invisible to everything but the outer Reshape's ``0`` entries ("copy
this dimension of my input"), which would read the inner result's dims. The
merge is done only when ``s2`` is a constant whose zeros copy a dim the inner
result provably shares with ``x`` (``-1`` is fine: it is computed from the element
count, which both inputs share), and the inner result has no other reader. Emitted kernels' layout glue (a head split feeding
a head merge) collapses this way.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.model import Model
from onnxopt.normalize._common import is_op, is_private, live_ops
from onnxopt.rewrite.driver import PassResult


def merge_reshapes(model: Model) -> PassResult:
    changes = 0
    for graph, outer in live_ops(model, "Reshape"):
        inner_value, target = outer.inputs[0], outer.input(1)
        inner = inner_value.producer
        if not is_op(inner, "Reshape") or not is_private(inner_value, outer):
            continue
        if target is None or target.const is None:
            continue
        dims = target.const.numpy().reshape(-1).tolist()
        if 0 in dims and not _zeros_copy_the_same(dims, inner_value.shape,
                                                  inner.inputs[0].shape, outer):
            continue
        graph.set_input(outer, 0, inner.inputs[0])
        graph.remove(inner)
        changes += 1
    return PassResult(changes)


def _zeros_copy_the_same(dims, inner_shape, x_shape, outer) -> bool:
    """Every ``0`` of the outer target copies a dim that the inner result and ``x`` provably
    share (and ``allowzero`` is off: with it, a 0 is a zero-sized dim either way)."""
    if outer.attr("allowzero", 0) or inner_shape is None or x_shape is None:
        return False
    return all(i < len(inner_shape) and i < len(x_shape) and sd.same(inner_shape[i], x_shape[i])
               for i, d in enumerate(dims) if d == 0)
