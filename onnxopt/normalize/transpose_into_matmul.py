"""Transposes of MatMul operands become MatMul flags; chains of Transposes become one.

Why: ``q @ k.transpose(-1, -2)`` reaches ONNX as ``Transpose(k, perm)`` feeding
a MatMul, with ``perm`` depending on how the exporter laid out the heads
(``[0,2,3,1]`` straight from ``[B,S,H,D]``, or ``[0,1,3,2]`` after a separate
head transpose). The attention pattern wants one form: ``MatMul(Q, K)`` with
``sem["transpose_b"]`` and ``K`` in the same ``[B,H,S,D]`` layout as ``Q``.

For ``perm = q`` with its last two entries swapped:

    MatMul(A, Transpose(X, perm))   ->  MatMul(A, X') <transpose_b>,  X' = X or Transpose(X, q)

(and the same for ``A`` with ``transpose_a``). ``X' = X`` when ``q`` is the
identity; otherwise only when ``q`` keeps X's last axis last (``perm[-2]`` is
X's last axis: the transpose moved the contiguous axis into the contraction),
so a head transpose ``[0,2,1,3]`` is left alone rather than turned into
``[0,2,3,1]`` plus a flag. A flag already set is toggled: ``swap(Transpose(X, perm)) =
Transpose(X, q)``. A new ``Transpose(X, q)`` is made only when the old one had
no other reader, so the node count never grows. Consecutive transposes merge:

    Transpose(Transpose(x, p1), p2)  ->  Transpose(x, c),  c[i] = p1[p2[i]]

(since ``out[i] = in[p2[i]]`` and ``in[j] = x[p1[j]]``), or ``x`` itself when
``c`` is the identity. The exporter writes the flag back as a Transpose of the
last two axes, so the exported model computes the same function.
"""

from __future__ import annotations

from collections.abc import Callable

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Node
from onnxopt.ir.semantics import annotate
from onnxopt.ir.value import Value
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.normalize._common import (
    ints_attr,
    is_private,
)
from onnxopt.rewrite.pattern import PatternRewrite, case

NAME = "transpose_into_matmul"
_FLAGS = ("transpose_a", "transpose_b")


def _chain(p: Builder) -> Pat:
    """Transpose(Transpose(x))."""
    inner = p.Transpose(p.var("x"), name="inner", other_inputs=True, other_attrs=True)
    return p.Transpose(inner, name="outer", other_inputs=True, other_attrs=True)


def _operand(i: int) -> Callable[[Builder], Pat]:
    """MatMul whose operand ``i`` is a Transpose (the other any value, or none)."""
    def build(p: Builder) -> Pat:
        t = p.Transpose(p.var("x"), name="t", other_inputs=True, other_attrs=True)
        other = p.var("other")
        return p.MatMul(*((t, other) if i == 0 else (other, t)), name="mm", commutative=False,
                        other_attrs=True)
    return build


def _absorb_operand(i: int) -> Callable[[Graph, Match], bool]:
    return lambda graph, m: _absorb(graph, m, i)


def _perm(node: Node) -> list[int] | None:
    perm = node.attr("perm", node.sem.get("perm"))
    return None if perm is None else [int(p) for p in perm]


def _permuted(shape, perm: list[int]):
    if shape is None or len(shape) != len(perm):
        return tuple(None for _ in perm)
    return tuple(shape[p] for p in perm)


def _merge(graph: Graph, m: Match) -> bool:
    """Transpose(Transpose(x, p1), p2) -> Transpose(x, p1∘p2), where the inner result has no
    other reader (a use count: not the pattern's to say)."""
    node, inner, x = m.outer, m.inner, m.x
    if not is_private(inner.output, node):
        return False
    p1, p2 = _perm(inner), _perm(node)
    if p1 is None or p2 is None or len(p1) != len(p2):
        return False
    combined = [p1[i] for i in p2]
    if combined == list(range(len(combined))):
        if not replace_value(graph, node.output, x):
            return False
        remove_if_dead(graph, node, inner)
        return True
    graph.set_input(node, 0, x)
    node.attrs["perm"] = ints_attr(combined)
    annotate(node)
    graph.changed(node)
    remove_if_dead(graph, inner)
    return True


def _absorb(graph: Graph, m: Match, i: int) -> bool:
    """MatMul operand ``i`` = Transpose(X, perm) with perm swapping the last two axes of q."""
    node, t, x = m.mm, m.t, m.x
    t_out = t.output
    perm = _perm(t)
    if perm is None or len(perm) < 2:
        return False
    q = perm[:-2] + [perm[-1], perm[-2]]
    flag = bool(node.sem.get(_FLAGS[i]))
    if q == list(range(len(q))):
        operand = x
        if not _has_rank(x, len(q), t_out, perm):
            return False
    elif not flag and q[-1] == len(q) - 1 and is_private(t_out, node):
        # only when X's innermost axis stays innermost: [B,S,H,D] -[0,2,3,1]-> K^T becomes
        # K = [B,H,S,D] <transpose_b>, while V = [B,H,S,D] from perm [0,2,1,3] stays as it is
        tq = NodeBuilder(graph, node, NAME, by_op=True).node("Transpose", [x],
                                                             attrs={"perm": ints_attr(q)},
                                                             dtype=x.dtype,
                                                             shape=_permuted(x.shape, q))
        operand = tq.output
    else:
        return False  # would trade one Transpose for another
    graph.set_input(node, i, operand)
    node.sem[_FLAGS[i]] = not flag
    node.sem[f"{_FLAGS[i]}_rank"] = len(q)  # what the exporter's Transpose swaps, kept here
    annotate(node)
    graph.changed(node)
    remove_if_dead(graph, t)
    return True


def _has_rank(x: Value, rank: int, t_out: Value, perm: list[int]) -> bool:
    """The exporter needs the flagged operand's rank; record it on a node output if missing."""
    if x.rank is not None:
        return x.rank == rank
    if x.producer is None:
        return False  # a graph input's declared type is the interface: leave it alone
    if t_out.shape is not None:
        inverse = [0] * len(perm)
        for k, p in enumerate(perm):
            inverse[p] = k
        x.shape = tuple(t_out.shape[inverse[j]] for j in range(len(perm)))
    else:
        x.shape = (None,) * rank
    return True


# Absorb operand Transposes into MatMul flags and merge Transpose chains, in one walk (a
# MatMul takes both of its operands' Transposes in turn).
transpose_into_matmul = PatternRewrite.of(
    case(_chain, ("Transpose",), _merge),
    case(_operand(0), ("MatMul",), _absorb_operand(0)),
    case(_operand(1), ("MatMul",), _absorb_operand(1)))
