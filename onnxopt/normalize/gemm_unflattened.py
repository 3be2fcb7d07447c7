"""A linear layer flattened around a Gemm becomes a MatMul on the tensor as it was.

    Reshape(Gemm(Reshape(x, [-1, K]), W, b), [d0, ..., dn-2, N])  ->  Add(MatMul(x, W), b)

Both PyTorch exporters write GPT-2's ``Conv1D`` (and any ``addmm`` over a view) so: the
rows of ``x`` ``[d0, ..., dn-2, K]`` are merged into one axis for the Gemm and split back
after it, the second Reshape reading its target from ``x``'s shape at run time. ``MatMul``
takes the leading axes as they are: the two Reshapes and their shape arithmetic go, and
every value keeps dims ONNX Runtime can name
(its allocation planner is markedly slower on values whose dims it cannot name).

A Reshape keeps element order, so ``[M, K]`` with ``x``'s ``K`` last holds ``x``'s rows in
order, and the Gemm's ``A·W + b`` row by row is ``MatMul(x, W) + b`` — exactly without a
bias; with one, the same sum in another order (a site of :mod:`onnxopt.ir.exactness`). Taken only
for the plain Gemm (``alpha = beta = 1``, no transposes), a bias that broadcasts along the
last axis only (``[N]``, ``[1, N]`` or a scalar), both Reshapes read by nothing else, and
a result whose shape shape inference proves to be ``x``'s leading dims and ``N``.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.normalize._common import is_op, is_private
from onnxopt.rewrite.driver import PassResult

NAME = "gemm_unflattened"


# A hand walk, not a pattern (onnxopt.rewrite.pattern): a pattern says a value back from its root
# through producers, but this rewrite starts at the Gemm (the exactness site is the Gemm's) and
# needs the Gemm's reader, the unflattening Reshape, which a pattern cannot name. Rooted at that
# Reshape instead, the walk would meet the rewrites in the Reshapes' order, not the Gemms', and
# where the orders differ (a layer's projections) the new nodes would take each other's names.
def gemm_unflattened(model: Model) -> PassResult:
    count = 0
    for graph in model.graph.all_graphs():
        for node in list(graph):
            if node.graph is not graph or not is_op(node, "Gemm"):
                continue
            if node.input(2) is not None and not model.exactness.permits(NAME, node):
                continue
            found = _flattened_linear(node)
            if found is None:
                continue
            flatten, unflatten, x = found
            weight, bias = node.input(1), node.input(2)
            out = unflatten.outputs[0]
            build = NodeBuilder(graph, unflatten, NAME, by_op=True)
            product = build.node("MatMul", [x, weight], dtype=out.dtype, shape=out.shape)
            result = product.output
            if bias is not None:
                result = build.node("Add", [result, bias], dtype=out.dtype, shape=out.shape).output
            # With a bias, not exact: ONNX Runtime's Gemm adds the bias first and accumulates
            # the products onto it, block by block of the inner dimension; MatMul then Add
            # adds it last (the same sum in another order, when ORT does not fuse them back).
            inexact = site(NAME, node) if bias is not None else None
            if not replace_value(graph, out, result, inexact=inexact):
                remove_if_dead(graph, result.producer, product)
                continue
            remove_if_dead(graph, unflatten, node, flatten)
            count += 1
    return PassResult(count)


def _flattened_linear(gemm: Node) -> tuple[Node, Node, Value] | None:
    """(the flattening Reshape, the unflattening Reshape, x) around a plain Gemm, or None."""
    if any(gemm.attr(name, 0) for name in ("transA", "transB")):
        return None
    if gemm.attr("alpha", 1.0) != 1.0 or gemm.attr("beta", 1.0) != 1.0:
        return None
    a, weight, bias = gemm.input(0), gemm.input(1), gemm.input(2)
    flatten = a.producer if a is not None else None
    if not is_op(flatten, "Reshape") or not is_private(a, gemm):
        return None
    x = flatten.input(0)
    if x is None or x.shape is None or len(x.shape) < 3 or a.shape is None or len(a.shape) != 2:
        return None
    if not sd.same(a.shape[1], x.shape[-1]):
        return None  # the flatten must merge rows only, keeping x's last axis
    if weight is None or weight.shape is None or len(weight.shape) != 2:
        return None
    n = weight.shape[1]
    if bias is not None and not _broadcasts_on_last_axis(bias, n):
        return None
    y = gemm.outputs[0]
    users = y.uses()
    if len(users) != 1 or y.is_graph_output:
        return None
    unflatten = users[0][0]
    if not is_op(unflatten, "Reshape") or users[0][1] != 0:
        return None
    want = (*x.shape[:-1], n)
    got = unflatten.outputs[0].shape
    if got is None or len(got) != len(want):
        return None
    if not all(sd.same(g, w) for g, w in zip(got, want)):
        return None
    return flatten, unflatten, x


def _broadcasts_on_last_axis(bias: Value, n) -> bool:
    shape = bias.shape
    if shape is None:
        return False
    if len(shape) == 0:
        return True
    if len(shape) == 1:
        return sd.same(shape[0], n) or shape[0] == 1
    return len(shape) == 2 and shape[0] == 1 and (sd.same(shape[1], n) or shape[1] == 1)
