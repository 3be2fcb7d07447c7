"""A boolean mask selecting a huge negative constant before a Softmax becomes an additive mask.

    Where(cond, x, c)  ->  Add(x, Where(cond, 0, c))
    Where(cond, c, x)  ->  Add(x, Where(Not(cond), 0, c))

for a scalar float constant ``c <= -1e30`` (or ``-inf``) when the Where's
result reaches only Softmax inputs, possibly through Adds (other masks,
position biases).

Why: exporters spell attention masking two ways — ``masked_fill`` gives
``Where(mask, scores, -inf)``, HF's extended mask gives ``scores + bias`` with
``bias`` 0 or ``finfo.min``. With one form, the attention pattern has one mask
slot, and the mask (``Where(cond, 0, c)``) no longer depends on the scores, so
it can be computed once per model rather than once per layer.

Why it is the same function: where ``cond`` holds, ``x + 0 == x`` exactly.
Where it does not, ``x + c`` rounds to ``c`` whenever ``|x|`` is below half a
unit in the last place of ``c`` (for ``c = -1e30`` in float32 that is about
3.8e22; for ``-inf`` any finite ``x``), so the Softmax input is bit for bit
what it was. Attention scores are many orders of magnitude smaller. Beyond
the Softmax the mask's exact value is invisible anyway: ``exp(c - max)`` is 0
in both forms. That is why the rewrite is limited to values that only feed a
Softmax: elsewhere the difference between ``c`` and ``x + c`` could be seen.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES, numpy_dtype
from onnxopt.ir.edit import replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Value
from onnxopt.normalize._common import (
    float_scalar,
    is_op,
    is_private,
    small_constant,
)
from onnxopt.rewrite.driver import PassResult

NAME = "where_to_additive"
THRESHOLD = -1e30


# A hand walk, not a pattern (onnxopt.rewrite.pattern): whether a Where reaches only Softmax
# inputs is a walk over its readers, memoized across the pass: patterns read producers.
def where_to_additive(model: Model) -> PassResult:
    """Turn Where-selected large negative fills feeding a Softmax into additive masks.

    Not exact where ``|x|`` is not negligible against ``c`` (see above): each rewrite is a
    site of :mod:`onnxopt.ir.exactness`."""
    count = 0
    for graph in model.graph.all_graphs():
        memo: dict[Value, bool] = {}  # keyed by the Value itself: ids of freed values recur
        for node in graph:
            if is_op(node, "Where") and len(node.inputs) == 3 \
                    and model.exactness.permits(NAME, node):
                count += _rewrite(graph, node, memo)
    return PassResult(count)


def _rewrite(graph: Graph, node: Node, memo: dict[Value, bool]) -> int:
    cond, a, b = node.inputs
    if cond is None or a is None or b is None or cond.dtype not in (None, "bool"):
        return 0
    fill_b, fill_a = _fill(b), _fill(a)
    if fill_b is not None and fill_a is None:
        x, c, negate = a, b, False
    elif fill_a is not None and fill_b is None:
        x, c, negate = b, a, True
    else:
        return 0
    if x.dtype not in FLOAT_TYPES or x.dtype != c.dtype or _is_zero(x):
        return 0  # x == 0: already the additive form's mask
    if not _reaches_only_softmax(node.output, memo):
        return 0
    build = NodeBuilder(graph, node, NAME, by_op=True)
    keep = cond
    if negate:
        inner = cond.producer
        if is_op(inner, "Not") and is_private(cond, node):
            keep = inner.inputs[0]  # Not(Not(y)) is y
        else:
            keep = build.node("Not", [cond], dtype="bool", shape=cond.shape).output
    zero = graph.add_constant(LazyTensor.from_array(np.zeros((), dtype=numpy_dtype(x.dtype))),
                              hint="mask_zero")
    mask = build.node("Where", [keep, zero, c], dtype=x.dtype,
                      shape=sd.broadcast_shapes(keep.shape, c.shape))
    add = build.node("Add", [x, mask.output], dtype=node.output.dtype, shape=node.output.shape)
    if not replace_value(graph, node.output, add.output, inexact=site(NAME, node)):
        graph.remove([add, mask])
        return 0
    graph.remove(node)
    if negate and keep is not cond and not cond.num_uses and not cond.is_graph_output:
        graph.remove(cond.producer)
    return 1


def _fill(v: Value) -> float | None:
    c = float_scalar(v)
    return c if c is not None and c <= THRESHOLD else None


def _is_zero(v: Value) -> bool:
    arr = small_constant(v, 1 << 16)
    return arr is not None and not np.any(arr)


def _reaches_only_softmax(value: Value, memo: dict[Value, bool]) -> bool:
    """Every reader of ``value`` is a Softmax (as its input) or an Add whose result is, in turn."""
    known = memo.get(value)
    if known is not None:
        return known
    memo[value] = False  # a cycle cannot happen in a DAG, but never loop if it did
    ok = not value.is_graph_output and value.num_uses > 0
    for user, index in value._uses if ok else ():
        if is_op(user, "Softmax") and index == 0:
            continue
        if is_op(user, "Add") and _reaches_only_softmax(user.output, memo):
            continue
        ok = False
        break
    memo[value] = ok
    return ok
