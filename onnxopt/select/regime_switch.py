"""One fused node bound to two kernels, each for the query lengths of its regime.

Where the best kernel of a decode step (a few queries against a cache) is not the best one
of a prefill (many queries), one compromise loses in one of them: causal attention in query
blocks is 0.7x the decomposition at 512 queries and 1.3-2.2x it in a decode step, where its
``Loop`` copies the whole cache into one block and nothing is masked. So the node becomes an
``If`` on its query length (the axis before the last of its first input): up to
``max_queries`` the decode kernel, above it the prefill kernel, each emitted into its own
branch from a copy of the fused node that reads the same outer values. Both branches compute
the fused op's function, so the output does not depend on which one runs; ONNX Runtime runs
only the branch taken.

The ``If`` is not free: its branches read the key/value cache from the outer graph, and in
ONNX Runtime (1.31, CPU) the attention's MatMuls over it run slower inside the branch than the
same nodes outside (profiled at past 1023: 1.3x and 1.6x; the If's own overhead is a few
microseconds) — 2-7% of a hidden-512 GPT-2 decode step (benchmarks/if_cache_cost.py;
RESULTS.md). So selection makes a switch
only where it costs less over the regimes than one kernel for all of them, the If priced in
(``onnxopt.select._switched_cost``, ``cost_model.switch_cost``).
"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Attr, Node
from onnxopt.legality.target import Target
from onnxopt.select.bind import bind, kernel_metadata
from onnxopt.select.kernel import Kernel, Layout

MIN_OPSET = 9  # Less on int64 (the query count)


def can_switch(node: Node, few: Kernel, many: Kernel, opset: int) -> bool:
    """Whether the node can be split by query length: an attention node (elsewhere, a norm or
    an activation, a regime's gain is a few microseconds, less than the If costs), with
    queries on an axis of its own, whose two kernels read and write the fused op's own layout
    (a packed-layout kernel takes the place of the model's head merge, outside the node)."""
    q = node.inputs[0] if node.inputs else None
    return (opset >= MIN_OPSET and node.op_type == "AttentionFused" and q is not None and q.rank is not None
            and q.rank >= 3
            and few.layout == Layout.BNSH and many.layout == Layout.BNSH)


def bind_by_queries(model: Model, node: Node, few: Kernel, many: Kernel, target: Target,
                    max_queries: int) -> None:
    """Replace ``node`` by ``If(queries <= max_queries, few, many)``."""
    graph = node.graph or model.graph
    created_by = f"select:{few.name}|{many.name}"
    b = NodeBuilder(graph, node, created_by, opset=model.opset)
    q = node.inputs[0]
    shape = b.op("Shape", q)
    # Gather, not Slice: Slice took its bounds as attributes before opset 10.
    queries = b.op("Gather", shape, b.const(np.array([q.rank - 2], np.int64), "seq_axis"),
                   axis=0)
    # A one-element condition, as If takes it (no Squeeze: its axes moved from an attribute
    # to an input at opset 13).
    few_queries = b.op("Less", queries, b.const(np.array([max_queries + 1], np.int64),
                                                "decode_queries"))
    outputs = [o for o in node.outputs if o.num_uses or o.is_graph_output]
    branches = [_branch(graph, node, outputs, "few_queries"),
                _branch(graph, node, outputs, "many_queries")]
    switch = b.op("If", few_queries, outputs=len(outputs),
                  then_branch=Attr(AttributeProto.GRAPH, branches[0][0]),
                  else_branch=Attr(AttributeProto.GRAPH, branches[1][0]))
    switch = switch if isinstance(switch, list) else [switch]
    if_node = switch[0].producer
    # The file says which kernel serves which query lengths; ``onnxopt.switch_queries`` is the
    # threshold, so that a check can run both branches (a run with that many queries).
    if_node.metadata.update({**kernel_metadata(many), "onnxopt.kernel": f"{few.name} "
                             f"(queries <= {max_queries}) | {many.name}",
                             "onnxopt.switch_queries": str(max_queries)})
    # And the query length in the inputs' symbols (``seq``, ``(total-past)``), so that the
    # check knows which sizes make a run take the few-queries branch.
    if isinstance(q.shape[-2], str) and not sd.is_fresh(q.shape[-2]) \
            and not sd.is_unknown_symbol(q.shape[-2]):
        if_node.metadata["onnxopt.switch_query_dim"] = q.shape[-2]
    for (sub, copy), kernel in zip(branches, (few, many)):
        sub.parent = if_node
        bind(model, copy, kernel, target)
    for old, new in zip(outputs, switch):
        new.dtype, new.shape = old.dtype, old.shape
        if not replace_value(graph, old, new):
            alias = b.op("Identity", new)
            alias.dtype, alias.shape = old.dtype, old.shape
            replace_value(graph, old, alias)
    for emitted in b.nodes:
        emitted.created_by = ""
    remove_if_dead(graph, node)


def _branch(graph: Graph, node: Node, outputs, label: str) -> tuple[Graph, Node]:
    """A branch graph holding a copy of ``node`` (reading the same outer values) whose
    outputs are the branch's outputs."""
    sub = Graph(graph.names.fresh(f"{node.name}/{label}"), names=graph.names)
    copy = sub.make_node(node.op_type, list(node.inputs), num_outputs=len(node.outputs),
                         domain=node.domain, attrs=dict(node.attrs),
                         name=graph.names.fresh(f"{node.name}/{label}"),
                         created_by=node.created_by)
    for old, new in zip(node.outputs, copy.outputs):
        new.dtype, new.shape = old.dtype, old.shape
    sub.set_outputs([copy.outputs[node.outputs.index(o)] for o in outputs])
    return sub, copy
