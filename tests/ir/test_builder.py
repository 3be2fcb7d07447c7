"""NodeBuilder.node: a typed node before the anchor, named by op type under ``by_op`` (as
normalization's nodes are) or after its maker otherwise, annotated, attributes made typed."""

from __future__ import annotations

from onnx import AttributeProto

from onnxopt.importer import import_model
from onnxopt.ir.builder import NodeBuilder

GRAPH = """
g (float[2, 3] x) => (float[2, 3] y) {
  y = Neg (x)
}
"""


def test_node_by_op_is_named_by_its_op_and_typed(make_model):
    model = import_model(make_model(GRAPH))
    graph = model.graph
    neg = next(iter(graph))
    build = NodeBuilder(graph, neg, "a_pass", by_op=True)
    first = build.node("ReduceMean", [graph.inputs[0]], attrs={"keepdims": 1}, dtype="float32",
                       shape=(2, 1))
    second = build.node("ReduceMean", [first.output], dtype="float32", shape=(1, 1))
    assert [n.name for n in graph] == ["ReduceMean", "ReduceMean_1", neg.name]
    assert first.output.name == "ReduceMean_out0"
    assert (first.output.dtype, first.output.shape) == ("float32", (2, 1))
    assert first.created_by == "a_pass" and build.nodes == [first, second]
    assert first.attrs["keepdims"].type == AttributeProto.INT
    assert first.sem["keepdims"] is True  # annotated


def test_node_named_after_its_maker_by_default(make_model):
    model = import_model(make_model(GRAPH))
    graph = model.graph
    node = NodeBuilder(graph, None, "rule").node("Abs", [graph.inputs[0]])
    assert node.name == "rule/Abs" and list(graph)[-1] is node
