"""Integer values that shapes prove equal are computed once.

    layer 0:  Concat(Unsqueeze(Gather(Shape(h0), 0)), Unsqueeze(Gather(Shape(h0), 1)), [768])
    layer 7:  Concat(Unsqueeze(Gather(Shape(h7), 0)), Unsqueeze(Gather(Shape(h7), 1)), [768])
        ->  layer 7 reads layer 0's value; its own chain is dead code

TorchScript computes every Reshape target from ``Shape`` of the tensor at hand, so a
GPT-2 export builds the same ``(batch, seq, 768)`` anew from each layer's hidden state,
several times per layer. Common-subexpression elimination cannot merge them — their
inputs are different tensors — but shape inference knows their contents symbolically,
and the contents are the same. Such a value is replaced by the first one computed: graph
order is topological, so that one's producer precedes every reader of the later ones.
A 24-layer GPT-2 keeps about half its nodes after fusion as such chains; every one is
paid again by each later stage and by ONNX Runtime, whose session creation grows faster
than the node count.

Shared are only values with an integer type, a static shape and contents known in full
(each entry a number or a symbol — a symbol stands for one size throughout the model, and
one of inference's own ``?N`` for one value's dim), made by a node of the same graph.
Constants are left to common-subexpression elimination; a graph output keeps its name.
"""

from __future__ import annotations

from onnxopt.ir.edit import replace_value
from onnxopt.ir.model import Model
from onnxopt.ir.value import Value
from onnxopt.normalize._common import known_shape, static_shape
from onnxopt.rewrite.driver import PassResult

_INTEGER_TYPES = frozenset({"int64", "int32"})


# A hand walk, not a pattern (onnxopt.rewrite.pattern): equal contents anywhere in a graph (a
# table over the walk): not a tree below one root.
def share_equal_shapes(model: Model) -> PassResult:
    """Make every reader of a provably repeated integer value read its first computation."""
    shared = 0
    for graph in model.graph.all_graphs():
        first: dict[tuple, Value] = {}
        for node in graph:
            for value in node.outputs:
                key = _contents_key(value)
                if key is None:
                    continue
                kept = first.setdefault(key, value)
                if kept is not value and value.num_uses and replace_value(graph, value, kept):
                    shared += 1
    return PassResult(shared)


def _contents_key(value: Value | None) -> tuple | None:
    """(dtype, shape, contents) of a computed integer value known in full, else ``None``."""
    if value is None or value.const is not None or value.dtype not in _INTEGER_TYPES:
        return None
    if not static_shape(value.shape) or not known_shape(value.sym):
        return None
    return (value.dtype, tuple(value.shape), tuple(value.sym))
