"""Where each initializer of a model's main graph lies in the file's bytes, and the model's
bytes without its large raw data.

The output holds most of the input's weights unchanged, and writing them meant encoding each
TensorProto again: on a 24-layer GPT-2, 78 MB of fresh bytes (0.045-0.06 s, most of it the
kernel handing out new pages). A tensor the pipeline did not change is the same message, so
its bytes in the input file are a valid encoding of it (parsed, they give exactly the message
the importer holds). The importer finds them here, and the serializer writes those bytes
(:func:`onnxopt.exporter.serialize.model_parts`) instead of encoding the message again.

Parsing the whole file copied every weight into protobuf's own memory (and the file's bytes,
read, were another copy): the importer parses a *skeleton* instead, the file's bytes with
each large raw data field of the main graph's initializers left out, and keeps those raw
bytes where they lie, in the file mapped into memory (:class:`StrippedModel`). The
skeleton is a few hundred KB where the model is 78 MB.

The walk reads the model's ``graph`` fields (a message field given twice is merged by a
parser, its repeated fields concatenated, so every ``graph`` field counts, in order) and,
inside them, the ``initializer`` fields; every other field is copied or skipped by its
length. Anything it does not expect gives ``None``: the file is then parsed whole, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnx import GraphProto, ModelProto, TensorProto

from onnxopt.ir.wire import encode_varint, field_key, spans

# A raw data field shorter than this stays in the skeleton (shape inference reads the small
# tensors' values: shape vectors, axes, scales; the importer's child drops larger ones too).
STRIPPED_MIN_BYTES = 4096
_RAW_DATA = TensorProto.RAW_DATA_FIELD_NUMBER
# A tensor that says more of its data than its raw data (where it lies: external data, or the
# location set explicitly; numbers in a typed field too; segments) keeps its message whole:
# what it means is for the importer, or ONNX Runtime, to read.
_SAYS_MORE_FIELDS = frozenset({
    TensorProto.EXTERNAL_DATA_FIELD_NUMBER, TensorProto.DATA_LOCATION_FIELD_NUMBER,
    TensorProto.SEGMENT_FIELD_NUMBER, TensorProto.FLOAT_DATA_FIELD_NUMBER,
    TensorProto.INT32_DATA_FIELD_NUMBER, TensorProto.STRING_DATA_FIELD_NUMBER,
    TensorProto.INT64_DATA_FIELD_NUMBER, TensorProto.DOUBLE_DATA_FIELD_NUMBER,
    TensorProto.UINT64_DATA_FIELD_NUMBER})


@dataclass(frozen=True)
class StrippedModel:
    """A model's bytes with the raw data of its main graph's large initializers left out.

    ``skeleton``: those bytes, to be parsed in place of the file's (``None`` where nothing
    was left out: the file's bytes are the skeleton); ``encodings``: each main-graph
    initializer's encoding in the file, whole, in the order a parser lists them; ``raw``:
    the raw data left out of the initializer at each such position (its message in the
    skeleton has no ``raw_data``; these bytes are it)."""

    skeleton: bytes | None
    encodings: list[memoryview]
    raw: dict[int, memoryview]


def strip_raw_data(data: bytes | memoryview, min_bytes: int | None = STRIPPED_MIN_BYTES
                   ) -> StrippedModel | None:
    """``data`` (a whole ModelProto's bytes) as a :class:`StrippedModel`: raw data fields of
    ``min_bytes`` or more left out (``None``: none is), or ``None`` where the walk meets what
    it does not expect."""
    view = memoryview(data)
    pieces: list[bytes | memoryview] = []
    stripped = StrippedModel(None, [], {})
    copied_to = 0
    try:
        for number, begin, start, end in spans(view):
            if number != ModelProto.GRAPH_FIELD_NUMBER or start < 0:
                continue
            graph = _graph_without_raw(view, start, end, stripped, min_bytes)
            if graph is not None:
                size = sum(len(p) for p in graph)
                pieces += [view[copied_to:begin], _KEY_GRAPH, encode_varint(size), *graph]
                copied_to = end
    except ValueError:
        return None
    if not stripped.raw:
        return stripped
    pieces.append(view[copied_to:])
    return StrippedModel(b"".join(pieces), stripped.encodings, stripped.raw)


def _graph_without_raw(view: memoryview, start: int, end: int, into: StrippedModel,
                       min_bytes: int | None) -> list[bytes | memoryview] | None:
    """The pieces of the graph encoded in ``view[start:end]`` with its initializers' large raw
    data left out (noted in ``into``, with every initializer's encoding), or ``None`` where
    none is."""
    pieces: list[bytes | memoryview] = []
    copied_to = start
    for number, begin, s, e in spans(view, start, end):
        if number != GraphProto.INITIALIZER_FIELD_NUMBER or s < 0:
            continue
        position = len(into.encodings)
        into.encodings.append(view[s:e])
        raw = large_raw_data(view, s, e, min_bytes)
        if raw is None:
            continue
        raw_begin, raw_start, raw_end = raw
        into.raw[position] = view[raw_start:raw_end]
        size = (e - s) - (raw_end - raw_begin)
        pieces += [view[copied_to:begin], _KEY_INITIALIZER, encode_varint(size),
                   view[s:raw_begin], view[raw_end:e]]
        copied_to = e
    if not pieces:
        return None
    pieces.append(view[copied_to:end])
    return pieces


def large_raw_data(view: memoryview, start: int, end: int, min_bytes: int | None
                    ) -> tuple[int, int, int] | None:
    """(field start, payload start, field end) of the tensor's raw data field where it is
    the only one, ``min_bytes`` long or more, and the tensor says nothing more of its data
    (``_SAYS_MORE_FIELDS``); else ``None``."""
    if min_bytes is None:
        return None
    found = None
    for number, begin, s, e in spans(view, start, end):
        if number in _SAYS_MORE_FIELDS:
            return None
        if number == _RAW_DATA:
            if found is not None or s < 0:
                return None
            found = (begin, s, e)
    if found is None or found[2] - found[1] < min_bytes:
        return None
    return found


_KEY_GRAPH = field_key(ModelProto.GRAPH_FIELD_NUMBER)
_KEY_INITIALIZER = field_key(GraphProto.INITIALIZER_FIELD_NUMBER)
