"""A runnable ONNX model of a piece of the IR, for evaluating it on probe inputs.

Mask probes cut the subgraph that computes a mask out of the model and run it at
several sizes; constant folding evaluates one node with onnx's reference evaluator.
Both need the piece as a standalone ModelProto, written by the exporter's own node
and tensor spelling (so a node of an old opset is written as that opset spells it).
"""

from __future__ import annotations

from onnx import ModelProto, helper

from onnxopt.exporter.build import ProtoWriter, value_info
from onnxopt.exporter.save import inline_external
from onnxopt.exporter.versions import choose_ir_version
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value


def cone(outputs: list[Value], limit: int = 2000, *, shape_leaves: bool = False
         ) -> tuple[list[Node], list[Value], list[Value]]:
    """Nodes computing ``outputs`` (in order), the graph inputs and constants they read.

    With ``shape_leaves``, the output of a ``Shape`` node counts as an input (its
    value is known from symbolic shapes), so the cone of a mask built from
    ``Shape(hidden_states)`` does not pull in the whole network. Returns an
    empty node list if the cone is larger than ``limit`` nodes or reaches into
    a subgraph's outer scope.
    """
    seen: dict[int, Node] = {}
    inputs: dict[int, Value] = {}
    consts: dict[int, Value] = {}
    stack = list(outputs)
    while stack:
        v = stack.pop()
        if v.const is not None:
            consts[id(v)] = v
            continue
        node = v.producer
        if node is None or (shape_leaves and node.op_type == "Shape"):
            inputs[id(v)] = v
            continue
        if id(node) in seen:
            continue
        if node.subgraphs() or len(seen) >= limit:
            return [], [], []
        seen[id(node)] = node
        stack.extend(x for x in node.inputs if x is not None)
    graph = outputs[0].graph
    order = [n for n in graph if id(n) in seen] if graph is not None else list(seen.values())
    return order, list(inputs.values()), list(consts.values())


def subgraph_model(model: Model, outputs: list[Value], *, shape_leaves: bool = False
                   ) -> ModelProto | None:
    nodes, inputs, consts = cone(outputs, shape_leaves=shape_leaves)
    if not nodes and any(v.producer is not None for v in outputs):
        return None
    exporter = ProtoWriter(model)
    graph = helper.make_graph(
        [p for n in nodes for p in exporter.node(n)], "probe",
        [value_info(v) for v in inputs], [value_info(v) for v in outputs],
        initializer=[exporter.tensor(v.const, v.name) for v in consts])
    proto = helper.make_model(graph, opset_imports=[
        helper.make_opsetid(d, v) for d, v in model.opset_imports.items()])
    proto.ir_version = choose_ir_version(model.ir_version, model.opset)
    if exporter.external:
        inline_external(proto, exporter.external)
    return proto
