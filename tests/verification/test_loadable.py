"""The safeguard's checks on a staged file: they load the file itself, as the user will."""

from __future__ import annotations

import onnx
from onnx import helper

from onnxopt.exporter.save import stage_bytes
from onnxopt.verification.loadable import fitness

IR_VERSION = 10


def _relu() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = IR_VERSION
    return model


def test_a_staged_file_that_loads_passes(tmp_path):
    model = _relu()
    staged = stage_bytes([model.SerializeToString()], str(tmp_path / "o.onnx"))
    found = fitness(model, staged=staged.tmp)
    assert found.problems() == [] and found.unchecked is None


def test_the_checks_load_the_staged_file_not_the_proto(tmp_path):
    """The file is what gets written: a file ORT refuses fails the checks, whatever the proto
    in memory says, and the problem names no temporary file."""
    model = _relu()
    broken = onnx.ModelProto()
    broken.CopyFrom(model)
    broken.graph.node[0].op_type = "NoSuchOp"
    staged = stage_bytes(broken.SerializeToString(), str(tmp_path / "o.onnx"))
    found = fitness(model, staged=staged.tmp)
    assert found.loads is not None and found.loads.startswith("ONNX Runtime cannot load it")
    assert found.checker is not None and "NoSuchOp" in found.checker
    for problem in found.problems():
        assert staged.tmp not in problem and ".tmp" not in problem


def test_a_staged_file_that_vanished_is_a_problem_not_a_crash(tmp_path):
    model = _relu()
    staged = stage_bytes(model.SerializeToString(), str(tmp_path / "o.onnx"))
    staged.discard()
    found = fitness(model, staged=str(tmp_path / ".gone.tmp"))
    assert found.loads is not None and found.checker is not None
