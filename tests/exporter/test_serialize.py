"""model_bytes: the same model as SerializeToString, its initializers spliced in."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import ModelProto, helper, numpy_helper

from onnxopt.evaluation import session
from onnxopt.exporter import serialize
from onnxopt.exporter.serialize import model_bytes
from onnxopt.ir.wire import encode_varint

IR_VERSION = 10


def _model(sizes: list[int]) -> ModelProto:
    """x + w0 + w1 + …, one initializer per size (lengths around varint's byte boundaries)."""
    inits, nodes, last = [], [], "x"
    for k, n in enumerate(sizes):
        inits.append(numpy_helper.from_array(np.arange(n, dtype=np.float32), f"w{k}"))
    for k, _ in enumerate(sizes):
        out = f"y{k}" if k < len(sizes) - 1 else "y"
        nodes.append(helper.make_node("Add", [last, f"w{k}"], [out]))
        last = out
    n = sizes[0]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [n])], inits,
        doc_string="after the initializers in field order")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              producer_name="test", doc_string="model doc")
    model.ir_version = IR_VERSION
    model.metadata_props.add(key="k", value="v")
    return model


@pytest.mark.parametrize("size", [1, 31, 32, 4096, 40000])
def test_reads_back_as_the_same_model(size):
    model = _model([size] * 3)
    data = model_bytes(model)
    again = ModelProto()
    again.ParseFromString(data)
    assert again == model
    assert len(data) == len(model.SerializeToString())
    onnx.checker.check_model(data)
    x = np.ones(size, dtype=np.float32)
    (y,) = session(data).run(None, {"x": x})
    np.testing.assert_array_equal(y, x + 3 * np.arange(size, dtype=np.float32))


def test_model_without_initializers_is_serialized_as_protobuf_does():
    model = _model([4])
    del model.graph.initializer[:]
    assert model_bytes(model) == model.SerializeToString()


def test_unknown_fields_are_kept():
    model = _model([4])
    extended = ModelProto()
    extended.ParseFromString(model.SerializeToString() + b"\xf8\x07\x05")  # field 127 = 5
    assert model_bytes(extended) == extended.SerializeToString()


def test_over_protobufs_limit_is_the_same_value_error(monkeypatch):
    monkeypatch.setattr(serialize, "PROTOBUF_MAX_BYTES", 1000)
    with pytest.raises(ValueError, match="2 GB"):
        model_bytes(_model([4096]))


def test_its_pieces_written_one_after_another_are_the_model(tmp_path):
    from onnxopt.exporter.save import stage_bytes

    model = _model([4096, 40000])
    parts = serialize.model_parts(model)
    assert len(parts) > 1  # spliced, not one encoded message
    staged = stage_bytes(parts, str(tmp_path / "m.onnx"))
    staged.commit()
    assert (tmp_path / "m.onnx").read_bytes() == model_bytes(model)
    assert onnx.load(str(tmp_path / "m.onnx")) == model


def _packed_dims_encoding(tensor: onnx.TensorProto) -> bytes:
    """``tensor``'s encoding with its dims packed: a valid encoding of the same message that
    protobuf's encoder never writes (onnx's ``dims`` are unpacked), so bytes that come out
    unchanged in a file were copied, not encoded again."""
    packed = b"".join(encode_varint(d) for d in tensor.dims)
    rest = onnx.TensorProto()
    rest.CopyFrom(tensor)
    del rest.dims[:]
    return b"\x0a" + encode_varint(len(packed)) + packed + rest.SerializeToString()


def test_given_encodings_are_written_as_they_are():
    model = _model([5, 7])
    encoding = _packed_dims_encoding(model.graph.initializer[1])
    assert onnx.TensorProto.FromString(encoding) == model.graph.initializer[1]
    assert encoding != model.graph.initializer[1].SerializeToString()
    view = memoryview(encoding)
    parts = serialize.model_parts(model, {1: view})
    assert any(p is view for p in parts)
    assert ModelProto.FromString(b"".join(parts)) == model


def test_an_encoding_named_otherwise_is_not_written():
    """A position that does not hold the tensor the encoding names is encoded anew."""
    model = _model([5, 7])
    wrong = memoryview(_packed_dims_encoding(model.graph.initializer[0]))
    unreadable = memoryview(b"\x43")
    parts = serialize.model_parts(model, {1: wrong, 0: unreadable})
    assert not any(p is wrong or p is unreadable for p in parts)
    assert ModelProto.FromString(b"".join(parts)) == model


def _packed_dims_model() -> tuple[bytes, bytes]:
    """A file's bytes whose weight ``w`` has its dims packed, and that weight's encoding."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32), "w")
    s = numpy_helper.from_array(np.full(6, 3.0, np.float32), "s")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["h"]), helper.make_node("Mul", ["h", "s"], ["y"])],
        "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [6])], [s])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = IR_VERSION
    encoding = _packed_dims_encoding(w)
    field = b"\x2a" + encode_varint(len(encoding)) + encoding  # GraphProto.initializer
    data = model.SerializeToString() + b"\x3a" + encode_varint(len(field)) + field
    return data, encoding


@pytest.mark.parametrize("checked", [True, False], ids=["staged", "written-after"])
def test_an_optimized_files_unchanged_weights_are_the_input_files_bytes(tmp_path, monkeypatch,
                                                                         checked):
    """End to end: a weight the pipeline keeps is written as the input file encodes it (the
    packed dims survive), the result loads as the same messages, and it computes the same:
    staged beside the output while checked, or written after (nothing staged, here made so)."""
    from onnxopt.cli import main
    from onnxopt.commands import optimize_cmd

    if not checked:
        monkeypatch.setattr(optimize_cmd, "staging_to", lambda output: None)
    data, encoding = _packed_dims_model()
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    src.write_bytes(data)
    assert main(["optimize", str(src), "-o", str(out), "--target", "cpu", "-q"]) == 0
    written = out.read_bytes()
    assert encoding in written
    names = {t.name: t for t in ModelProto.FromString(written).graph.initializer}
    assert names == {t.name: t for t in ModelProto.FromString(data).graph.initializer}
    x = np.ones(6, dtype=np.float32)
    (y,) = session(written).run(None, {"x": x})
    np.testing.assert_array_equal(y, (x + np.arange(6, dtype=np.float32)) * 3)
