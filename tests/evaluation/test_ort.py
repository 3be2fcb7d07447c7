"""``evaluation.session``: a model at a path ONNX Runtime's C++ cannot be handed still loads."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from onnxopt.evaluation import native_path, run, session

IR_VERSION = 10


def _relu() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = IR_VERSION
    return model


def test_a_folder_named_in_bytes_that_are_not_utf8(tmp_path):
    folder = tmp_path / "caf\udce9"  # the byte 0xE9 on its own (Latin-1), kept as a surrogate
    folder.mkdir()
    path = str(folder / "m.onnx")
    onnx.save(_relu(), path)
    assert not native_path(path) and native_path(str(tmp_path / "m.onnx"))
    (y,) = run(session(path), {"x": np.array([-1.0, 2.0], dtype=np.float32)})
    np.testing.assert_array_equal(y, [0.0, 2.0])
