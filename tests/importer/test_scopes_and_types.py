"""Names scoped per graph; optional, sequence and sparse values kept with their types.

Each model here is valid ONNX that ONNX Runtime runs; onnxopt must take it, write a file
ORT loads, and compute the same thing.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxopt


def _ort(model: onnx.ModelProto):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _model(graph: onnx.GraphProto, opset: int = 18) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def test_sibling_subgraphs_may_reuse_a_local_name():
    def branch(name: str, op: str) -> onnx.GraphProto:
        # both branches define a value called "t" and an output called "out"
        return helper.make_graph(
            [helper.make_node(op, ["x"], ["t"]), helper.make_node("Identity", ["t"], ["out"])],
            name, [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3])])

    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch("then", "Relu"),
                          else_branch=branch("else", "Neg"))], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = _model(g)
    out = onnxopt.optimize(model, target="cpu")
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        np.testing.assert_array_equal(_ort(model).run(None, feeds)[0], _ort(out).run(None, feeds)[0])


def test_optional_and_sequence_inputs_keep_their_types():
    opt_type = helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    seq_type = helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    g = helper.make_graph(
        [helper.make_node("OptionalHasElement", ["o"], ["has"]),
         helper.make_node("SequenceInsert", ["s", "x"], ["s2"]),
         helper.make_node("SequenceLength", ["s2"], ["n"])], "g",
        [helper.make_value_info("o", opt_type), helper.make_value_info("s", seq_type),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
         helper.make_value_info("s2", seq_type),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    model = _model(g)
    out = onnxopt.optimize(model, target="cpu")
    types = {vi.name: vi.type for vi in list(out.graph.input) + list(out.graph.output)}
    assert types["o"] == opt_type and types["s"] == seq_type and types["s2"] == seq_type
    x = np.ones(2, np.float32)
    feeds = {"o": x, "s": [x, x], "x": x}
    want, got = _ort(model).run(None, feeds), _ort(out).run(None, feeds)
    assert bool(want[0]) == bool(got[0]) and int(want[2]) == int(got[2]) == 3


def test_sparse_initializers_pass_through():
    values = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.5, -2.0])
    indices = helper.make_tensor("w_idx", TensorProto.INT64, [2], [0, 3])
    sparse = helper.make_sparse_tensor(values, indices, [4])
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        sparse_initializer=[sparse])
    model = _model(g)
    out = onnxopt.optimize(model, target="cpu")
    assert [s.values.name for s in out.graph.sparse_initializer] == ["w"]
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(_ort(out).run(None, {"x": x})[0], x + [1.5, 0, 0, -2.0])
