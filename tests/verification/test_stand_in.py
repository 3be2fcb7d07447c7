"""The stand-in copy (verification/stand_in.py): the checks of a result no staged file holds,
at any size. Each large float weight becomes a reference of its type, shape and length into
a sparse file of zeros; what a load can depend on keeps its values; the lengths are the ones
the written file will have, so ONNX Runtime's size check still bites."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxopt.exporter.save import EXTERNAL_MARK
from onnxopt.importer.wire import STRIPPED_MIN_BYTES
from onnxopt.ir.tensor import ExternalLocation, LazyTensor
from onnxopt.verification import loadable
from onnxopt.verification.stand_in import STAND_IN_NAME, write_stand_in_copy

N = STRIPPED_MIN_BYTES  # float32 elements: 4x the bytes that make a weight large


def _model(initializers: list[TensorProto], nodes: list[onnx.NodeProto], inputs, outputs):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _info(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


@pytest.fixture
def weights():
    big = numpy_helper.from_array(np.arange(N, dtype=np.float32), "big")
    small = numpy_helper.from_array(np.ones(4, np.float32), "small")
    table = numpy_helper.from_array(np.arange(N, dtype=np.int64), "table")
    return big, small, table


def test_large_float_weights_are_stood_in_and_the_rest_keeps_its_values(weights, tmp_path):
    big, small, table = weights
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])
    model = _model([big, small, table], [helper.make_node("Add", ["x", "big"], ["y"])],
                   [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])])
    copy = write_stand_in_copy(model, parent=str(tmp_path))
    try:
        light = onnx.load(copy.path, load_external_data=False)
        by_name = {t.name: t for t in light.graph.initializer}
        assert by_name["big"].data_location == TensorProto.EXTERNAL
        assert (by_name["big"].dims, by_name["big"].data_type) == (big.dims, big.data_type)
        assert _info(by_name["big"]) == {"location": STAND_IN_NAME, "offset": "0",
                                         "length": str(N * 4)}
        assert by_name["small"] == small and by_name["table"] == table
        assert light.graph.node == model.graph.node
        assert os.path.getsize(os.path.join(copy.folder, STAND_IN_NAME)) == N * 4
        assert copy.stood_in == 1
    finally:
        copy.discard()
    assert os.listdir(tmp_path) == []


def test_weights_left_out_of_the_proto_and_placeholders_get_their_sources_lengths(
        weights, tmp_path):
    """The pipeline's results lack the raw data of the input's unchanged weights (``left_out``)
    and carry placeholders for external ones: the copy takes their lengths from there, and an
    integer one's bytes."""
    big, _, table = weights
    left_float, left_int = TensorProto(), TensorProto()
    left_float.CopyFrom(big)
    left_float.ClearField("raw_data")
    left_int.CopyFrom(table)
    left_int.ClearField("raw_data")
    data = tmp_path / "w.bin"
    ints = np.arange(N, dtype=np.int64)
    data.write_bytes(b"\0" * 8 + ints.tobytes())
    placeholders = {}
    for name, dtype, offset, length in (("ext_f", TensorProto.FLOAT16, 0, 2 * N),
                                        ("ext_i", TensorProto.INT64, 8, 8 * N)):
        t = TensorProto(name=name, data_type=dtype, dims=[N])
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value=EXTERNAL_MARK)
        placeholders[name] = t
    external = {
        "ext_f": LazyTensor("float16", (N,), external=ExternalLocation(str(data), 0, 2 * N)),
        "ext_i": LazyTensor("int64", (N,), external=ExternalLocation(str(data), 8, 8 * N))}
    model = _model([left_float, left_int, placeholders["ext_f"], placeholders["ext_i"]], [],
                   [], [])
    left_out = {0: memoryview(big.raw_data), 1: memoryview(table.raw_data)}
    copy = write_stand_in_copy(model, external, left_out, parent=str(tmp_path))
    try:
        light = {t.name: t for t in onnx.load(copy.path, load_external_data=False)
                 .graph.initializer}
        assert _info(light["big"])["length"] == str(N * 4)
        assert _info(light["ext_f"])["length"] == str(2 * N)
        np.testing.assert_array_equal(numpy_helper.to_array(light["table"]),
                                      numpy_helper.to_array(table))
        np.testing.assert_array_equal(numpy_helper.to_array(light["ext_i"]), ints)
        assert copy.stood_in == 2
    finally:
        copy.discard()


def _forced_through_the_stand_in(monkeypatch) -> None:
    monkeypatch.setattr(loadable, "CHECKED_FROM_BYTES_MAX", 0)


def test_an_integer_divisor_keeps_its_values(monkeypatch):
    """ORT refuses an integer Div by a constant zero when it makes the kernel: a stand-in of
    zeros for the divisor would refuse a model that loads."""
    _forced_through_the_stand_in(monkeypatch)
    ones = numpy_helper.from_array(np.ones(N, np.int64), "d")
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [N])
    model = _model([ones], [helper.make_node("Div", ["x", "d"], ["y"])], [x],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, [N])])
    assert loadable.fitness(model).problems() == []
    ones.raw_data = np.zeros(N, np.int64).tobytes()
    model.graph.initializer[0].CopyFrom(ones)
    assert "Div" in loadable.fitness(model).loads


def test_a_weight_whose_data_does_not_fit_its_shape_is_still_refused(monkeypatch):
    """The stand-in has the raw data's own length, so ORT's check of each initializer's size
    against its type and shape sees what the written file will hold."""
    _forced_through_the_stand_in(monkeypatch)
    short = numpy_helper.from_array(np.ones(N, np.float32), "w")
    short.raw_data = short.raw_data[:-4]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])
    model = _model([short], [helper.make_node("Add", ["x", "w"], ["y"])], [x],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])])
    found = loadable.fitness(model)
    assert found.loads is not None and "size mismatch" in found.loads
    assert "onnxopt-checks-" not in found.loads


def test_a_copy_that_cannot_be_written_leaves_the_checks_undone_and_says_why(monkeypatch):
    _forced_through_the_stand_in(monkeypatch)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(loadable, "write_stand_in_copy", full)
    w = numpy_helper.from_array(np.ones(N, np.float32), "w")
    found = loadable.fitness(_model([w], [], [], []))
    assert found.unchecked == ("its copy for the checks could not be written (No space left on "
                               "device)")
    assert found.problems() == []


def test_text_that_is_not_utf8_is_copied_byte_for_byte(weights, tmp_path):
    """The input's own checks read it with its text as it is (fuzz run 62: an int8 model whose
    doc string a flipped byte left not UTF-8): protobuf hands such text out as bytes, which
    assigning to a string field decodes, and failed (an internal error)."""
    big, _small, _table = weights
    big.name = "wq~name"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])
    node = helper.make_node("Add", ["x", "wq~name"], ["y"], doc_string="node~doc")
    model = _model([big], [node], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])])
    model.doc_string, model.graph.doc_string = "model~doc", "graph~doc"
    data = model.SerializeToString()
    for mark, count in ((b"wq~name", 2), (b"node~doc", 1), (b"model~doc", 1), (b"graph~doc", 1)):
        assert data.count(mark) == count
        data = data.replace(mark, mark.replace(b"~", b"\xfa"))
    broken = onnx.ModelProto()
    broken.ParseFromString(data)
    assert isinstance(broken.doc_string, bytes) and isinstance(broken.graph.doc_string, bytes)
    copy = write_stand_in_copy(broken, parent=str(tmp_path))
    try:
        light = onnx.ModelProto()
        with open(copy.path, "rb") as f:
            light.ParseFromString(f.read())
        assert (light.doc_string, light.graph.doc_string) == (b"model\xfadoc", b"graph\xfadoc")
        assert light.graph.initializer[0].name == b"wq\xfaname"
        assert light.graph.node == broken.graph.node
        assert _info(light.graph.initializer[0])["location"] == STAND_IN_NAME
    finally:
        copy.discard()
