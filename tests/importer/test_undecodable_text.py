"""Names that are not UTF-8: found wherever they are, decoded the same way everywhere."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnxopt.importer.load import has_undecodable_text, parse_model_bytes

MARK = "QQQQ"  # replaced in the serialized bytes by four bytes that are not UTF-8


def _model(where: str) -> bytes:
    names = {k: (MARK if k == where else k) for k in ("value", "node", "weight", "attr")}
    node = helper.make_node("Add", ["x", names["weight"]], [names["value"]], name=names["node"])
    relu = helper.make_node("LeakyRelu", [names["value"]], ["y"], alpha=0.5)
    if where == "attr":
        relu.attribute[0].name = MARK
    graph = helper.make_graph(
        [node, relu], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), names["weight"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    data = model.SerializeToString()
    assert data.count(MARK.encode()) >= (where != "none")
    return data.replace(MARK.encode(), b"\xff\xfeQQ")


@pytest.mark.parametrize("where", ["value", "node", "weight", "attr"])
def test_bytes_that_are_not_utf8_are_found(where):
    proto = onnx.ModelProto()
    proto.ParseFromString(_model(where))
    assert has_undecodable_text(proto)


def test_a_clean_model_has_none():
    proto = onnx.ModelProto()
    proto.ParseFromString(_model("none"))
    assert not has_undecodable_text(proto)


@pytest.mark.parametrize("where", ["value", "weight"])
def test_each_occurrence_decodes_to_the_same_name(where):
    proto = parse_model_bytes(_model(where), "m.onnx")
    assert not has_undecodable_text(proto)
    text = "\ufffd\ufffdQQ"
    if where == "value":
        assert proto.graph.node[0].output[0] == proto.graph.node[1].input[0] == text
    else:
        assert proto.graph.initializer[0].name == proto.graph.node[0].input[1] == text


@pytest.mark.parametrize("where", ["value", "node"])
def test_imported_from_a_file_with_inferred_shapes(where, tmp_path):
    """Read from a file, the text is fixed while onnx's inference runs in its child; that child
    was handed the unfixed proto (which protobuf cannot write back), so it is started again on
    the fixed one, and the intermediate value still gets its inferred shape."""
    from onnxopt.importer.build import import_model

    path = tmp_path / "m.onnx"
    path.write_bytes(_model(where))
    model = import_model(str(path))
    (add,) = [n for n in model.graph if n.op_type == "Add"]
    assert add.outputs[0].shape == (2,)


def test_a_failure_while_inference_runs_leaves_no_child(tmp_path, monkeypatch):
    """Import's own work overlaps onnx's inference child; where that work raises, the child
    is stopped and reaped rather than left behind."""
    import os

    from onnxopt.importer import build

    children = []
    start = build.started

    def recording(fn, *args):
        children.append(start(fn, *args))
        return children[-1]

    monkeypatch.setattr(build, "started", recording)

    def broken(graph):
        raise RuntimeError("declared names")

    monkeypatch.setattr(build, "_declared_names", broken)
    path = tmp_path / "m.onnx"
    path.write_bytes(_model("none"))
    with pytest.raises(RuntimeError, match="declared names"):
        build.import_model(str(path))
    pids = [c._pid for c in children if hasattr(c, "_pid")]
    assert pids
    for pid in pids:
        with pytest.raises(ChildProcessError):  # already reaped
            os.waitpid(pid, os.WNOHANG)
