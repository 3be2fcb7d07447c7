"""The main graph's initializers keep their bytes in the input file (importer/wire.py), and a
result's file holds those bytes: the same messages, not encoded again."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import GraphProto, ModelProto, TensorProto, helper, numpy_helper

from onnxopt.importer import import_model
from onnxopt.importer.wire import strip_raw_data

IR_VERSION = 10


def _model(weights: int = 2, with_loop: bool = False) -> ModelProto:
    inits = [numpy_helper.from_array(np.full(3, k + 1, np.float32), f"w{k}")
             for k in range(weights)]
    nodes, last = [], "x"
    for k in range(weights):
        out = "y" if k == weights - 1 and not with_loop else f"h{k}"
        nodes.append(helper.make_node("Add", [last, f"w{k}"], [out]))
        last = out
    if with_loop:  # a subgraph with an initializer of its own
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond"], ["cond_out"]),
             helper.make_node("Mul", ["acc", "inner"], ["acc_out"])], "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
             helper.make_tensor_value_info("acc", TensorProto.FLOAT, [3])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3])],
            [numpy_helper.from_array(np.full(3, 2.0, np.float32), "inner")])
        inits += [numpy_helper.from_array(np.array(2, np.int64), "trips"),
                  numpy_helper.from_array(np.array(True), "go")]
        nodes.append(helper.make_node("Loop", ["trips", "go", last], ["y"], body=body))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = IR_VERSION
    return model


def _graph_field(graph: GraphProto) -> bytes:
    data = graph.SerializeToString()
    return bytes([ModelProto.GRAPH_FIELD_NUMBER << 3 | 2]) + _varint(len(data)) + data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def test_each_encoding_parses_to_the_parsed_initializer():
    data = _model(3).SerializeToString()
    parsed = ModelProto.FromString(data)
    found = strip_raw_data(data, None).encodings
    assert len(found) == len(parsed.graph.initializer) == 3
    for encoding, tensor in zip(found, parsed.graph.initializer):
        assert TensorProto.FromString(bytes(encoding)) == tensor


def test_a_graph_given_twice_lists_both_graphs_initializers_as_a_parser_merges_them():
    extra = GraphProto()
    extra.initializer.append(numpy_helper.from_array(np.zeros(2, np.float32), "later"))
    data = _model(2).SerializeToString() + _graph_field(extra)
    parsed = ModelProto.FromString(data)
    assert [t.name for t in parsed.graph.initializer] == ["w0", "w1", "later"]
    found = strip_raw_data(data, None).encodings
    assert [TensorProto.FromString(bytes(e)).name for e in found] == ["w0", "w1", "later"]


def test_a_count_other_than_the_parsers_or_bytes_it_cannot_walk_give_none(tmp_path,
                                                                          monkeypatch):
    """Bytes the walk cannot follow give nothing; a walk that counts other initializers than
    the parser (it cannot, unmocked) is not trusted: the file is then parsed whole."""
    from onnxopt.importer import load

    data = _model(2).SerializeToString()
    assert strip_raw_data(data + b"\x3b", None) is None  # a group's key: not walked
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    real = load.strip_raw_data

    def one_too_many(found, min_bytes=None):
        walked = real(found, min_bytes)
        return type(walked)(walked.skeleton, [*walked.encodings, walked.encodings[0]], {})

    monkeypatch.setattr(load, "strip_raw_data", one_too_many)
    mapped = load.map_model_file(str(path))
    assert mapped.encodings is None and not mapped.raw
    assert mapped.proto == ModelProto.FromString(data)


def test_imported_from_a_file_the_main_graphs_constants_carry_their_bytes(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(2, with_loop=True), str(path))
    model = import_model(str(path))
    data = path.read_bytes()
    main = model.graph.constants
    for name in ("w0", "w1", "trips", "go"):
        encoded = main[name].const.encoded
        assert encoded is not None and bytes(encoded) in data
        assert TensorProto.FromString(bytes(encoded)) == main[name].const.proto
    loop, = [n for n in model.graph if n.op_type == "Loop"]
    body = loop.attrs["body"].value
    assert body.constants["inner"].const.encoded is None  # a subgraph's: encoded as before


def test_a_model_given_as_a_proto_has_no_file_bytes():
    model = import_model(_model(2))
    assert all(v.const.encoded is None for v in model.graph.constants.values())


def test_text_fixed_at_import_drops_the_file_bytes(tmp_path):
    """A name that is not UTF-8 is decoded in the message, which then is not what the file
    holds: its old bytes must not be written."""
    data = _model(2).SerializeToString().replace(b"w1", b"\xff\xfe")
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    model = import_model(str(path))
    assert all(v.const.encoded is None for v in model.graph.constants.values())

