"""``has_external_data``: any tensor of a graph whose bytes lie in a file, wherever it sits."""

from __future__ import annotations

import pytest
from onnx import GraphProto, TensorProto, helper

from onnxopt.importer.load import has_external_data


def _external(name: str) -> TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[4],
                    data_location=TensorProto.EXTERNAL)
    t.external_data.add(key="location", value="w.bin")
    return t


def _graph(initializers=(), nodes=(), sparse=()) -> GraphProto:
    graph = helper.make_graph(
        list(nodes), "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], list(initializers))
    graph.sparse_initializer.extend(sparse)
    return graph


def _inline() -> TensorProto:
    return helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])


def _constant(t: TensorProto):
    return helper.make_node("Constant", [], ["c"], value=t)


@pytest.mark.parametrize("where", ["initializer", "constant", "subgraph", "sparse"])
def test_found_wherever_it_lies(where):
    ext = _external("w")
    if where == "initializer":
        graph = _graph([ext])
    elif where == "constant":
        graph = _graph(nodes=[_constant(ext)])
    elif where == "subgraph":
        body = _graph(nodes=[_constant(ext)])
        graph = _graph(nodes=[helper.make_node("If", ["cond"], ["y"], then_branch=body,
                                               else_branch=_graph())])
    else:
        indices = helper.make_tensor("i", TensorProto.INT64, [1], [0])
        graph = _graph(sparse=[helper.make_sparse_tensor(ext, indices, [4])])
    assert has_external_data(graph)


def test_inline_tensors_are_not_external():
    body = _graph(nodes=[_constant(_inline())])
    graph = _graph([_inline()], [helper.make_node("If", ["cond"], ["y"], then_branch=body,
                                                  else_branch=_graph())])
    assert not has_external_data(graph)
