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
from onnxopt.ir.graph import Graph
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.normalize._common import is_private
from onnxopt.rewrite.pattern import PatternRewrite, case


def _two_reshapes(p: Builder) -> Pat:
    """Reshape(Reshape(x, s1), s2) with s2 a constant (attributes are read by ``_merge``)."""
    inner = p.Reshape(p.var("x"), p.maybe(p.var("s1")), name="inner", other_inputs=True,
                      other_attrs=True)
    return p.Reshape(inner, p.const("target"), name="outer", other_inputs=True,
                     other_attrs=True)


def _merge(graph: Graph, m: Match) -> bool:
    """The outer Reshape reads ``x`` itself, where the inner result has no other reader and
    the outer target's zeros copy the same dims from ``x`` (not a pattern's business: use
    counts and symbolic dims)."""
    outer, inner = m.outer, m.inner
    if not is_private(inner.output, outer):
        return False
    dims = m.target.const.numpy().reshape(-1).tolist()
    if 0 in dims and not _zeros_copy_the_same(dims, inner.output.shape, m.x.shape, outer):
        return False
    graph.set_input(outer, 0, m.x)
    graph.remove(inner)
    return True


merge_reshapes = PatternRewrite.of(case(_two_reshapes, ("Reshape",), _merge))


def _zeros_copy_the_same(dims, inner_shape, x_shape, outer) -> bool:
    """Every ``0`` of the outer target copies a dim that the inner result and ``x`` provably
    share (and ``allowzero`` is off: with it, a 0 is a zero-sized dim either way)."""
    if outer.attr("allowzero", 0) or inner_shape is None or x_shape is None:
        return False
    return all(i < len(inner_shape) and i < len(x_shape) and sd.same(inner_shape[i], x_shape[i])
               for i, d in enumerate(dims) if d == 0)
