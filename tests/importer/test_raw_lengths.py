"""The importer counts each initializer's raw data once (``raw_lengths``), for the source's
weight and for each tensor's check: the counts must be the ones the message gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxopt.importer.build import import_model
from onnxopt.importer.load import raw_lengths, read_model_proto, tensor_bytes, tensor_problem

ROOT = Path(__file__).resolve().parents[2]


def _graph() -> onnx.GraphProto:
    raw = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "raw")
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [2], [1.0, 2.0])
    twice_a = numpy_helper.from_array(np.zeros(4, dtype=np.float32), "twice")
    twice_b = numpy_helper.from_array(np.zeros(8, dtype=np.float32), "twice")
    outside = TensorProto(name="outside", data_type=TensorProto.FLOAT, dims=[4],
                          data_location=TensorProto.EXTERNAL)
    outside.external_data.add(key="location", value="w.bin")
    return helper.make_graph([], "g", [], [], [raw, typed, twice_a, twice_b, outside])


def _saved_add(w: TensorProto, folder: Path) -> str:
    """``y = x + w`` for a 4-element ``x``, saved in ``folder``."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = folder / "add.onnx"
    onnx.save(model, path)
    return str(path)


def test_counts_inline_raw_data_of_names_given_once():
    assert raw_lengths(_graph()) == {"raw": 24}


def test_tensor_bytes_is_the_same_with_the_counts():
    model = helper.make_model(_graph())
    for path in sorted((ROOT / "models").glob("*.ts.onnx"))[:3]:
        proto = read_model_proto(str(path))
        assert tensor_bytes(proto, raw_lengths=raw_lengths(proto.graph)) == tensor_bytes(proto)
    assert tensor_bytes(model, raw_lengths=raw_lengths(model.graph)) == tensor_bytes(model)


def test_tensor_problem_takes_the_count_given():
    t = numpy_helper.from_array(np.zeros((2, 3), dtype=np.float32), "w")
    assert tensor_problem(t) is None and tensor_problem(t, 24) is None
    assert tensor_problem(t, 20) == "20 bytes of data where its type and shape need 24"


def test_a_short_initializer_is_still_kept_as_it_is(tmp_path):
    """A main-graph initializer whose raw data is short is found so with the counts."""
    short = numpy_helper.from_array(np.zeros(4, dtype=np.float32), "w")
    short.raw_data = short.raw_data[:12]
    imported = import_model(_saved_add(short, tmp_path))
    assert "w" in imported.graph.opaque_initializers
    assert "w" not in imported.graph.constants
    assert imported.source_tensor_bytes == 12


def test_the_importer_checks_with_the_counts_it_made(tmp_path, monkeypatch):
    """Its check reads the counted length, not the message again (a count that disagrees
    with the data, which cannot happen unmocked, shows which one it read)."""
    from onnxopt.importer import build

    path = _saved_add(numpy_helper.from_array(np.zeros(4, dtype=np.float32), "w"), tmp_path)
    assert "w" in import_model(path).graph.constants
    monkeypatch.setattr(build, "raw_lengths", lambda graph, left_out=None: {"w": 12})
    assert "w" in import_model(path).graph.opaque_initializers
