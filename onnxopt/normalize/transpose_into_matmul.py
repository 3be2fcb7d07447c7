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

from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.semantics import annotate
from onnxopt.ir.value import Value
from onnxopt.normalize._common import (
    ints_attr,
    is_op,
    is_private,
    new_node,
)
from onnxopt.rewrite.driver import PassResult

NAME = "transpose_into_matmul"
_FLAGS = ("transpose_a", "transpose_b")


def transpose_into_matmul(model: Model) -> PassResult:
    """Absorb operand Transposes into MatMul flags and merge Transpose chains."""
    count = 0
    for graph in model.graph.all_graphs():
        for node in graph:
            if is_op(node, "Transpose"):
                count += _merge(graph, node)
            elif is_op(node, "MatMul") and len(node.inputs) == 2:
                count += sum(_absorb(graph, node, i) for i in (0, 1))
    return PassResult(count)


def _perm(node: Node) -> list[int] | None:
    perm = node.attr("perm", node.sem.get("perm"))
    return None if perm is None else [int(p) for p in perm]


def _permuted(shape, perm: list[int]):
    if shape is None or len(shape) != len(perm):
        return tuple(None for _ in perm)
    return tuple(shape[p] for p in perm)


def _merge(graph: Graph, node: Node) -> int:
    """Transpose(Transpose(x, p1), p2) -> Transpose(x, p1∘p2)."""
    v = node.inputs[0]
    inner = v.producer if v is not None else None
    if not is_op(inner, "Transpose") or not is_private(v, node):
        return 0
    p1, p2 = _perm(inner), _perm(node)
    if p1 is None or p2 is None or len(p1) != len(p2):
        return 0
    x = inner.inputs[0]
    combined = [p1[i] for i in p2]
    if combined == list(range(len(combined))):
        if not replace_value(graph, node.output, x):
            return 0
        remove_if_dead(graph, node, inner)
        return 1
    graph.set_input(node, 0, x)
    node.attrs["perm"] = ints_attr(combined)
    annotate(node)
    graph.changed(node)
    remove_if_dead(graph, inner)
    return 1


def _absorb(graph: Graph, node: Node, i: int) -> int:
    """MatMul operand ``i`` = Transpose(X, perm) with perm swapping the last two axes of q."""
    t_out = node.inputs[i]
    t = t_out.producer if t_out is not None else None
    if not is_op(t, "Transpose"):
        return 0
    perm = _perm(t)
    if perm is None or len(perm) < 2:
        return 0
    q = perm[:-2] + [perm[-1], perm[-2]]
    x = t.inputs[0]
    flag = bool(node.sem.get(_FLAGS[i]))
    if q == list(range(len(q))):
        operand = x
        if not _has_rank(x, len(q), t_out, perm):
            return 0
    elif not flag and q[-1] == len(q) - 1 and is_private(t_out, node):
        # only when X's innermost axis stays innermost: [B,S,H,D] -[0,2,3,1]-> K^T becomes
        # K = [B,H,S,D] <transpose_b>, while V = [B,H,S,D] from perm [0,2,1,3] stays as it is
        tq = new_node(graph, "Transpose", [x], before=node, created_by=NAME,
                      attrs={"perm": ints_attr(q)}, dtype=x.dtype, shape=_permuted(x.shape, q))
        operand = tq.output
    else:
        return 0  # would trade one Transpose for another
    graph.set_input(node, i, operand)
    node.sem[_FLAGS[i]] = not flag
    node.sem[f"{_FLAGS[i]}_rank"] = len(q)  # what the exporter's Transpose swaps, kept here
    annotate(node)
    graph.changed(node)
    remove_if_dead(graph, t)
    return 1


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
