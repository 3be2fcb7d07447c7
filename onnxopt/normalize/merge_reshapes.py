"""Two reshapes in a row are one: only the last target shape matters.

    Reshape(Reshape(x, s1), s2)  ->  Reshape(x, s2)

A Reshape never moves data, it only renames the layout, so the intermediate
shape is invisible to everything but the outer Reshape's ``0`` entries ("copy
this dimension of my input"), which would read the inner result's dims. The
merge is done only when ``s2`` is a constant without zeros (``-1`` is fine: it
is computed from the element count, which both inputs share) and the inner
result has no other reader. Emitted kernels' layout glue (a head split feeding
a head merge) collapses this way.
"""

from __future__ import annotations

from onnxopt.ir.model import Model
from onnxopt.normalize._common import is_op, is_private, live_ops


def merge_reshapes(model: Model) -> int:
    changes = 0
    for graph, outer in live_ops(model, "Reshape"):
        inner_value, target = outer.inputs[0], outer.input(1)
        inner = inner_value.producer
        if not is_op(inner, "Reshape") or not is_private(inner_value, outer):
            continue
        if target is None or target.const is None:
            continue
        dims = target.const.numpy().reshape(-1).tolist()
        if 0 in dims:  # (without a 0, allowzero changes nothing)
            continue
        graph.set_input(outer, 0, inner.inputs[0])
        graph.remove(inner)
        changes += 1
    return changes
