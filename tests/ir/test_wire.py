"""ir.wire: fields found in encoded messages where a parser finds them; bad bytes refused."""

from __future__ import annotations

import itertools

import pytest
from onnx import GraphProto, ModelProto, TensorProto, helper

from onnxopt.ir.wire import encode_varint, field_key, fields, last_string, spans


def _tensor() -> TensorProto:
    t = helper.make_tensor("w", TensorProto.FLOAT, [2, 3], [1.0] * 6, raw=False)
    t.doc_string = "d" * 300  # a length over one varint byte
    return t


def test_each_field_is_found_with_its_payload():
    t = _tensor()
    data = memoryview(t.SerializeToString())
    found = {number: (s, e) for number, s, e in fields(data)}
    assert bytes(data[slice(*found[TensorProto.NAME_FIELD_NUMBER])]) == b"w"
    assert bytes(data[slice(*found[TensorProto.DOC_STRING_FIELD_NUMBER])]) == b"d" * 300
    assert found[TensorProto.DATA_TYPE_FIELD_NUMBER] == (-1, -1)  # a varint: no payload


def test_fields_of_a_nested_message_between_its_bounds():
    graph = helper.make_graph([], "g", [], [], [_tensor()])
    data = memoryview(graph.SerializeToString())
    (start, end), = [(s, e) for n, s, e in fields(data) if n == 5]  # GraphProto.initializer
    assert TensorProto.FromString(bytes(data[start:end])) == graph.initializer[0]
    assert last_string(data[start:end], TensorProto.NAME_FIELD_NUMBER) == b"w"


def test_the_last_of_a_repeated_singular_field_is_the_one_a_parser_keeps():
    data = _tensor().SerializeToString() + helper.make_tensor(
        "v", TensorProto.FLOAT, [1], [0.0]).SerializeToString()
    assert TensorProto.FromString(data).name == "v"
    assert last_string(memoryview(data), TensorProto.NAME_FIELD_NUMBER) == b"v"
    assert last_string(memoryview(b""), TensorProto.NAME_FIELD_NUMBER) is None


@pytest.mark.parametrize("data", [
    b"\x42\x05ab",  # a length past the end
    b"\x42",  # ends inside a field
    b"\x43",  # wire type 3: a group
    b"\x08" + b"\xff" * 11,  # a varint longer than ten bytes
    b"\x0d\x00\x00",  # a fixed32 cut short
])
def test_malformed_bytes_raise_value_error(data):
    with pytest.raises(ValueError):
        list(fields(memoryview(data)))


@pytest.mark.parametrize("n", [0, 1, 127, 128, 16383, 16384, 2**31 - 1])
def test_varint(n):
    from google.protobuf.internal.encoder import _VarintBytes

    assert encode_varint(n) == _VarintBytes(n)


def test_spans_cover_the_message_field_after_field():
    data = memoryview(_tensor().SerializeToString())
    found = list(spans(data))
    assert found[0][1] == 0 and found[-1][3] == len(data)
    assert all(a[3] == b[1] for a, b in itertools.pairwise(found))  # no gap, no overlap
    name = next(f for f in found if f[0] == TensorProto.NAME_FIELD_NUMBER)
    assert bytes(data[name[1]:name[3]]) == b"\x42\x01w"  # key, length, payload
    kind = next(f for f in found if f[0] == TensorProto.DATA_TYPE_FIELD_NUMBER)
    assert kind[2] == -1 and bytes(data[kind[1]:kind[3]]) == b"\x10\x01"  # a varint: no payload


def test_field_keys_are_protobufs_own():
    """The keys the wire rewrites write (a graph, an initializer, external data, a data
    location) are the ones protobuf writes for those fields."""
    model = ModelProto(graph=GraphProto(name="g"))
    assert model.SerializeToString().startswith(field_key(ModelProto.GRAPH_FIELD_NUMBER))
    tensor = TensorProto(data_location=TensorProto.EXTERNAL)
    assert tensor.SerializeToString() == field_key(
        TensorProto.DATA_LOCATION_FIELD_NUMBER, length_delimited=False) + b"\x01"
    tensor = TensorProto()
    tensor.external_data.add(key="k", value="v")
    assert tensor.SerializeToString().startswith(
        field_key(TensorProto.EXTERNAL_DATA_FIELD_NUMBER))
