"""A transpose done on a flattened view becomes a transpose of the original tensor.

PyTorch's SDPA export under dynamo transposes K as a 3-D tensor:
``[B,H,S,D] → Reshape [B*H,S,D] → Transpose [0,2,1] → Reshape [B,H,D,S]``.
The two reshapes only merge and split the leading axes that the transpose
keeps in place, so the whole chain is one 4-D transpose:

    Reshape(Transpose(Reshape(x, merge leading k axes), perm), split them back)
        ->  Transpose(x, [0..k-1] + [k-1 + p for p in perm[1:]])

Proof obligations, checked on symbolic shapes: the first reshape merges a
prefix of ``x``'s axes into one and keeps the rest; ``perm[0] == 0``; the
second reshape splits axis 0 back into exactly that prefix and keeps the rest.
Afterwards ``transpose_into_matmul`` can turn the result into a MatMul flag.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.graph import Graph
from onnxopt.ir.semantics import annotate
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.normalize._common import ints_attr
from onnxopt.normalize.shape_of_transpose import read_before_transpose
from onnxopt.rewrite.pattern import PatternRewrite, case


def _reshape_transpose_reshape(p: Builder) -> Pat:
    """Reshape(Transpose(Reshape(x, s1), perm), s2) (targets and perm read by the rewrite)."""
    inner = p.Reshape(p.var("x"), p.maybe(p.var("s1")), name="inner", other_inputs=True,
                      other_attrs=True)
    t = p.Transpose(inner, name="t", other_inputs=True, other_attrs=True)
    return p.Reshape(t, p.maybe(p.var("s2")), name="outer", other_inputs=True,
                     other_attrs=True)


def _one_transpose(graph: Graph, m: Match) -> bool:
    """What the pattern cannot say: each view read for its data by the next alone (use
    counts), and the symbolic-shape proof that the chain is one transpose of ``x``."""
    outer, t, inner = m.outer, m.t, m.inner
    if not _read_for_data_by(t.output, outer) or not _read_for_data_by(inner.output, t):
        return False
    perm = _fused_perm(m.x.shape, inner.output.shape, t.attr("perm"),
                       outer.output.shape, _target(inner), _target(outer))
    if perm is None or not _sizes_read_elsewhere(graph, t):
        return False
    node = graph.make_node("Transpose", [m.x], before=outer, attrs={"perm": ints_attr(perm)},
                           created_by="transpose_through_reshape")
    node.output.dtype, node.output.shape = outer.output.dtype, outer.output.shape
    annotate(node)
    if not replace_value(graph, outer.output, node.output):
        graph.remove(node)
        return False
    graph.remove([outer, t])
    remove_if_dead(graph, inner)  # kept where a Shape still reads it (a free view in ORT)
    return True


transpose_through_reshape = PatternRewrite.of(
    case(_reshape_transpose_reshape, ("Reshape",), _one_transpose))


def _sizes_read_elsewhere(graph, t) -> bool:
    """Move the transposed view's Shape readers (BLOOM reads the key length off it) to the
    transpose's input, through perm; whether none is left."""
    readers = [n for n, _ in t.output.uses() if n.op_type in ("Shape", "Size")]
    if any(n.op_type == "Size" for n in readers):
        return False
    return all(read_before_transpose(graph, reader) for reader in readers)


def _read_for_data_by(value, reader) -> bool:
    """``value`` is read by ``reader`` alone, Shape and Size readers aside (they need only
    its dims, which the kept Reshape still gives), and is not a graph output."""
    data = [n for n, _ in value.uses() if n.op_type not in ("Shape", "Size")]
    return len(data) == 1 and data[0] is reader and not value.is_graph_output


def _target(reshape) -> list[int] | None:
    """A Reshape's constant target without 0s (a 0 would copy, and allowzero could change
    that), else None."""
    shape = reshape.inputs[1] if len(reshape.inputs) > 1 else None
    if shape is None or shape.const is None:
        return None
    t = [int(v) for v in shape.const.numpy().reshape(-1)]
    return None if 0 in t else t


def _counted(target, known) -> bool:
    """``target`` is ``[-1, *known]`` with ``known`` all numbers: the element count fixes the
    -1, so the reshape gives axis 0 whatever the unknown leading dims multiply to."""
    return (target is not None and len(target) == len(known) + 1 and target[0] == -1
            and all(isinstance(d, int) and d == t for d, t in zip(known, target[1:])))


def _fused_perm(x, merged, perm, out, merge_target=None, split_target=None):
    if x is None or merged is None or out is None or perm is None or perm[0] != 0:
        return None
    if sorted(perm) != list(range(len(merged))):
        return None
    rest = len(merged) - 1
    k = len(x) - rest
    if k < 2 or tuple(x[k:]) != tuple(merged[1:]):
        return None
    if not (sd.same(merged[0], sd.product(x[:k])) or _counted(merge_target, list(x[k:]))):
        return None
    moved = [merged[p] for p in perm]
    if len(out) != k + rest:
        return None
    if not (all(sd.same(a, b) for a, b in zip(out[:k], x[:k]))
            or _counted(split_target, [*x[1:k], *moved[1:]])):
        return None
    if not all(sd.same(a, b) for a, b in zip(out[k:], moved[1:])):
        return None
    return list(range(k)) + [k - 1 + p for p in perm[1:]]
