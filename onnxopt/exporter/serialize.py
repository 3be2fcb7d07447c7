"""A model's bytes, with its weights spliced in rather than encoded with the whole message.

protobuf's encoder writes one large message slowly: serializing a 78 MB GPT-2 in one call
took 0.18–0.22 s, while serializing its initializers one by one took 0.02–0.07 s (upb
encodes a nested message into a buffer that it grows and copies as the message grows).
Protobuf's wire format lets a message's fields come in any order, and a repeated field's
elements are read in the order they come. So the bytes are put together here: the model
without its graph, the graph field's tag and length, the graph without its initializers,
then each initializer as its own field. Any parser reads the same model from these bytes
as from ``SerializeToString``'s. Only the order of fields differs.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet
from onnx import GraphProto, ModelProto, TensorProto

from onnxopt.ir.wire import encode_varint, field_key, last_string

# protobuf refuses to parse (and to write) a message of 2 GB or more.
PROTOBUF_MAX_BYTES = (1 << 31) - 1


def model_bytes(proto: ModelProto) -> bytes:
    """``proto.SerializeToString()``, faster for a model with large initializers; the same
    ``ValueError`` above protobuf's 2 GB."""
    return b"".join(model_parts(proto))


def model_parts(proto: ModelProto, encoded: dict[int, memoryview] | None = None,
                layout: dict[int, tuple[int, bytes | memoryview]] | None = None
                ) -> list[bytes | memoryview]:
    """:func:`model_bytes` in pieces, to be written one after the other: joined, they are one
    more copy of every weight. ``encoded``: initializers of the graph, by position, whose
    bytes are at hand as the input file holds them (the exporter's
    :func:`onnxopt.exporter.build.export_model_encoded`): those pieces are those bytes, not
    a new encoding. Each is the same message's encoding (its name is checked against the
    message's: a position that does not match is encoded anew). ``layout``, where given, is
    filled with each initializer's offset in the joined bytes and its encoding, by position
    (:mod:`onnxopt.verification.light_copy` finds the weights in the written file so)."""
    encoded = encoded or {}
    graph = proto.graph
    if (not proto.HasField("graph") or not len(graph.initializer)
            or len(UnknownFieldSet(proto)) or len(UnknownFieldSet(graph))):
        return [proto.SerializeToString()]  # nothing to splice, or fields only the encoder keeps
    initializer_tag = field_key(GraphProto.INITIALIZER_FIELD_NUMBER)
    parts = [copy_without(graph, "initializer").SerializeToString()]
    at = len(parts[0])  # offsets within the graph's payload, until the header is known
    where: dict[int, tuple[int, bytes | memoryview]] = {}
    for position, tensor in enumerate(graph.initializer):
        data = encoded.get(position)
        if data is None or not _names(data, tensor.name):
            data = tensor.SerializeToString()
        length = encode_varint(len(data))
        parts += (initializer_tag, length, data)
        at += len(initializer_tag) + len(length)
        where[position] = (at, data)
        at += len(data)
    graph_size = at
    head = copy_without(proto, "graph").SerializeToString()
    header = (head, field_key(ModelProto.GRAPH_FIELD_NUMBER), encode_varint(graph_size))
    header_size = sum(len(p) for p in header)
    if graph_size + header_size > PROTOBUF_MAX_BYTES:
        raise ValueError("the model is larger than protobuf's 2 GB limit")
    if layout is not None:
        layout.update({k: (header_size + offset, data) for k, (offset, data) in where.items()})
    return [*header, *parts]


def copy_without(message: Message, skipped: str) -> Message:
    """A copy of ``message`` holding every field it sets but ``skipped`` (listed, not copied)."""
    copy = type(message)()
    for field, value in message.ListFields():
        if field.name != skipped:
            copy_field(copy, field, value)
    return copy


def copy_field(target: Message, field: FieldDescriptor, value) -> None:
    """Give ``target`` the ``field`` another message holds as ``value`` (a repeated field's
    items appended). A string protobuf hands out as ``bytes`` — text that is not UTF-8, in an
    input read as it is (``read_model_proto(fix_text=False)``: the input's own checks) — goes
    in through its wire encoding, byte for byte: assigning it would decode it, and fail."""
    if field.type == field.TYPE_STRING and (
            isinstance(value, bytes) or (field.is_repeated and any(isinstance(x, bytes)
                                                                   for x in value))):
        items = value if field.is_repeated else [value]
        target.MergeFromString(b"".join(
            field_key(field.number) + encode_varint(len(b)) + b
            for b in (x if isinstance(x, bytes) else x.encode("utf-8") for x in items)))
    elif field.is_repeated:
        getattr(target, field.name).extend(value)
    elif field.type == field.TYPE_MESSAGE:
        getattr(target, field.name).CopyFrom(value)
    else:
        setattr(target, field.name, value)


def _names(encoding: memoryview, name: str) -> bool:
    """Whether a TensorProto's ``encoding`` gives it ``name`` (read without copying the rest)."""
    try:
        found = last_string(encoding, TensorProto.NAME_FIELD_NUMBER)
    except ValueError:
        return False
    return (found or b"") == name.encode("utf-8", "surrogatepass")
