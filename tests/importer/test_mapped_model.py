"""The importer maps the file and parses it without its large raw data (importer/wire.py,
load.map_model_file): what it builds, and every file written from it, must be the model the
file holds, number for number, whatever the tensors are (packed, of a wrong length, given
twice, external) and wherever the file comes from (a pipe is read, not mapped)."""

from __future__ import annotations

import os
import threading

import numpy as np
import onnx
import pytest
from onnx import GraphProto, ModelProto, TensorProto, helper, numpy_helper

import onnxopt
from onnxopt.importer import import_model
from onnxopt.importer.load import map_model_file, tensor_bytes
from onnxopt.importer.wire import STRIPPED_MIN_BYTES, strip_raw_data
from onnxopt.options import OptimizeOptions

IR_VERSION = 10
BIG = STRIPPED_MIN_BYTES // 4 * 2  # float32 elements: twice the threshold's bytes


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"big": rng.standard_normal(BIG).astype(np.float32),
            "small": rng.standard_normal(4).astype(np.float32)}


def _model(extra: list[TensorProto] = (), nodes: list = (), seed: int = 0) -> ModelProto:
    """``y = (x + big)[:4] * small`` on a ``BIG``-element ``x``, with ``extra`` initializers."""
    w = _weights(seed)
    inits = [numpy_helper.from_array(w["big"], "big"), numpy_helper.from_array(w["small"], "small"),
             numpy_helper.from_array(np.array([0], np.int64), "start"),
             numpy_helper.from_array(np.array([4], np.int64), "end"), *extra]
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "big"], ["s"]),
         helper.make_node("Slice", ["s", "start", "end"], ["h"]),
         helper.make_node("Mul", ["h", "small"], ["y"]), *nodes], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BIG])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def _saved(model: ModelProto, folder, name: str = "m.onnx") -> str:
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def _initializers(proto: ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer if t.name != "odd"}


# --------------------------------------------------------------------------- the wire walk


def test_the_skeleton_is_the_model_without_its_large_raw_data():
    model = _model()
    data = model.SerializeToString()
    stripped = strip_raw_data(data)
    skeleton = ModelProto.FromString(stripped.skeleton)
    expected = ModelProto()
    expected.CopyFrom(model)
    expected.graph.initializer[0].ClearField("raw_data")
    assert skeleton == expected
    assert list(stripped.raw) == [0]
    assert bytes(stripped.raw[0]) == model.graph.initializer[0].raw_data
    assert [bytes(e) for e in stripped.encodings] == [
        bytes(e) for e in strip_raw_data(data, None).encodings]
    assert [TensorProto.FromString(bytes(e)) for e in stripped.encodings] == list(
        model.graph.initializer)


def test_nothing_left_out_gives_no_skeleton():
    data = _model().SerializeToString()
    stripped = strip_raw_data(data, min_bytes=None)
    assert stripped.skeleton is None and not stripped.raw
    assert len(stripped.encodings) == 4


def test_a_graph_field_given_twice_is_walked_in_order():
    """A parser merges two ``graph`` fields, their initializers one after the other."""
    model = _model()
    second = GraphProto()
    second.initializer.append(numpy_helper.from_array(np.ones(BIG, np.float32), "more"))
    data = model.SerializeToString() + bytes([ModelProto.GRAPH_FIELD_NUMBER << 3 | 2]) + \
        _varint(second.ByteSize()) + second.SerializeToString()
    stripped = strip_raw_data(data)
    parsed = ModelProto.FromString(data)
    assert [t.name for t in ModelProto.FromString(stripped.skeleton).graph.initializer] == \
        [t.name for t in parsed.graph.initializer]
    assert sorted(stripped.raw) == [0, 4]
    assert bytes(stripped.raw[4]) == parsed.graph.initializer[4].raw_data


@pytest.mark.parametrize("tensor", ["external", "location", "twice", "typed too", "segment"])
def test_a_tensor_that_says_more_keeps_its_message_whole(tensor):
    t = numpy_helper.from_array(np.zeros(BIG, np.float32), "odd")
    if tensor == "external":
        t.external_data.add(key="location", value="w.bin")
    elif tensor == "location":
        t.data_location = TensorProto.DEFAULT
    elif tensor == "typed too":  # numbers in a typed field as well: for a reader to judge
        t.float_data.append(1.0)
    elif tensor == "segment":
        t.segment.begin = 0
    message = t.SerializeToString()
    if tensor == "twice":  # raw data given twice: a parser keeps the last
        message += bytes([TensorProto.RAW_DATA_FIELD_NUMBER << 3 | 2]) + _varint(8) + bytes(8)
    field = bytes([GraphProto.INITIALIZER_FIELD_NUMBER << 3 | 2]) + _varint(len(message))
    graph = field + message  # a second graph field holding it
    data = _model().SerializeToString() + bytes([ModelProto.GRAPH_FIELD_NUMBER << 3 | 2]) + \
        _varint(len(graph)) + graph
    assert len(ModelProto.FromString(data).graph.initializer) == 5
    stripped = strip_raw_data(data)
    assert sorted(stripped.raw) == [0]  # the model's own large weight only
    assert bytes(stripped.encodings[4]) == message


def test_bytes_that_are_not_a_message_give_none():
    data = _model().SerializeToString()
    assert strip_raw_data(data[:-3]) is None
    assert strip_raw_data(b"\x3a\x05ab") is None


def _varint(n: int) -> bytes:
    from onnxopt.ir.wire import encode_varint

    return encode_varint(n)


# --------------------------------------------------------------------------- the importer


def test_the_importer_reads_large_weights_where_they_lie(tmp_path):
    model = _model()
    path = _saved(model, tmp_path)
    mapped = map_model_file(path)
    assert not mapped.proto.graph.initializer[0].HasField("raw_data")
    assert mapped.proto.graph.initializer[1].HasField("raw_data")  # small: parsed as always
    assert tensor_bytes(mapped.proto, left_out=mapped.raw) == tensor_bytes(model)
    imported = import_model(path)
    big = imported.graph.constants["big"].const.numpy()
    np.testing.assert_array_equal(big, _weights()["big"])
    assert not big.flags.owndata and not big.flags.writeable  # a view of the file's bytes
    assert imported.source_tensor_bytes == tensor_bytes(model)


def test_a_pipe_is_read_not_mapped(tmp_path):
    model = _model()
    fifo = str(tmp_path / "m.onnx")
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(model.SerializeToString())

    writer = threading.Thread(target=write)
    writer.start()
    try:
        imported = import_model(fifo)
    finally:
        writer.join()
    np.testing.assert_array_equal(imported.graph.constants["big"].const.numpy(),
                                  _weights()["big"])


def test_a_packed_tensor_is_read_through_onnx(tmp_path):
    values = np.resize(np.arange(-8, 8, dtype=np.int8), 4 * BIG)
    q = numpy_helper.from_array(values.astype(onnx.helper.tensor_dtype_to_np_dtype(
        TensorProto.INT4)), "q")
    assert len(q.raw_data) >= STRIPPED_MIN_BYTES
    path = _saved(_model([q], [helper.make_node("Identity", ["q"], ["q_out"])]), tmp_path)
    imported = import_model(path)
    np.testing.assert_array_equal(
        imported.graph.constants["q"].const.numpy().astype(np.int8), values)


# --------------------------------------------------------------------------- what is written


@pytest.mark.parametrize("kind", ["plain", "wrong length", "given twice", "text"])
def test_every_output_holds_the_files_numbers(tmp_path, kind):
    extra = []
    if kind == "wrong length":  # kept as it was, bytes and all
        odd = numpy_helper.from_array(np.ones(BIG, np.float32), "odd")
        odd.raw_data = odd.raw_data[:-4]
        extra = [odd]
    model = _model(extra)
    if kind == "given twice":  # ORT's pick: kept as they were
        model.graph.initializer.append(numpy_helper.from_array(np.full(BIG, 7, np.float32),
                                                               "big"))
    if kind == "text":  # text that is not UTF-8: the messages are fixed, the weights stay
        model.doc_string = "d"
    data = model.SerializeToString()
    if kind == "text":
        data = data.replace(b"\x32\x01d", b"\x32\x01\xff")  # ModelProto.doc_string = 0xff
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    out = tmp_path / "m.opt.onnx"
    returned = onnxopt.optimize(str(path), str(out), target="cpu")
    written = onnx.load(str(out))
    original = ModelProto.FromString(data)
    for name, value in _initializers(original).items():
        if kind == "given twice" and name == "big":
            continue
        np.testing.assert_array_equal(_initializers(written)[name], value)
        np.testing.assert_array_equal(_initializers(returned)[name], value)
    if kind == "given twice":
        assert [t.raw_data for t in written.graph.initializer if t.name == "big"] == [
            t.raw_data for t in original.graph.initializer if t.name == "big"]
    if kind == "wrong length":
        assert [t for t in written.graph.initializer if t.name == "odd"] == [
            t for t in original.graph.initializer if t.name == "odd"]


def test_written_with_external_data_the_weights_go_out_whole(tmp_path):
    from onnxopt.api import write_result
    from onnxopt.safeguard import optimize_guarded

    model = _model()
    path = _saved(model, tmp_path)
    result = optimize_guarded(path, OptimizeOptions(target="cpu"))
    assert result.left_out
    result.model.had_external_data = True  # as for an input with external data
    out = str(tmp_path / "ext.onnx")
    write_result(result, out, path)
    assert os.path.exists(out + ".data")
    np.testing.assert_array_equal(_initializers(onnx.load(out))["big"], _weights()["big"])


@pytest.mark.parametrize("model", ["made", "bert.ts.onnx"])
def test_a_result_checked_through_its_stand_in_copy_is_written_whole_and_not_refused(
        tmp_path, monkeypatch, model):
    """A result too large to be checked from its bytes, and not from its staged file, is
    checked through its stand-in copy (verification/stand_in.py): that copy must give each
    weight the length of the raw data its proto lacks (a wrong one read as a refusal, and the
    input came out unoptimized), and the file is written whole."""
    from pathlib import Path

    from onnxopt import safeguard
    from onnxopt.verification import loadable

    if model == "made":
        path = _saved(_model(), tmp_path)
    else:
        path = str(Path(__file__).resolve().parents[2] / "models" / model)
    # Less than the model, more than what its proto holds without its large raw data.
    monkeypatch.setattr(loadable, "CHECKED_FROM_BYTES_MAX", tensor_bytes(onnx.load(path)) // 2)
    assert tensor_bytes(map_model_file(path).proto) < loadable.CHECKED_FROM_BYTES_MAX
    monkeypatch.setattr(safeguard, "_checkable", lambda staged: False)
    copies = []
    write = loadable.write_stand_in_copy
    monkeypatch.setattr(loadable, "write_stand_in_copy",
                        lambda *a, **k: copies.append(write(*a, **k)) or copies[-1])
    out = str(tmp_path / "out.onnx")
    result = onnxopt.optimize(path, out, target="cpu", return_result=True)
    assert result.report.stages["safeguard"] == {"checks": "passed"}
    assert len(copies) == 1 and copies[0].stood_in > 0
    assert not os.path.exists(copies[0].folder)
    original, written = onnx.load(path), onnx.load(out)
    assert _initializers(original).keys() >= {t.name for t in written.graph.initializer
                                              if t.name in _initializers(original)}
    for t in written.graph.initializer:
        if t.name in _initializers(original):
            np.testing.assert_array_equal(numpy_helper.to_array(t), _initializers(original)[t.name])
