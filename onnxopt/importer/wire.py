"""Where each initializer of a model's main graph lies in the file's bytes.

The output holds most of the input's weights unchanged, and writing them meant encoding each
TensorProto again: on a 24-layer GPT-2, 78 MB of fresh bytes (0.045-0.06 s, most of it the
kernel handing out new pages). A tensor the pipeline did not change is the same message, so
its bytes in the input file are a valid encoding of it (parsed, they give exactly the message
the importer holds). The importer finds them here, and the serializer writes those bytes
(:func:`onnxopt.exporter.serialize.model_parts`) instead of encoding the message again.

The walk reads the model's ``graph`` fields (a message field given twice is merged by a
parser, its repeated fields concatenated, so every ``graph`` field counts, in order) and,
inside them, the ``initializer`` fields; every other field is skipped by its length.
Anything it does not expect gives ``None``, and the tensors are then encoded as before.
"""

from __future__ import annotations

from onnx import GraphProto, ModelProto

from onnxopt.ir.wire import fields


def initializer_encodings(data: bytes, count: int) -> list[memoryview] | None:
    """The bytes of each main-graph initializer as ``data`` (a whole ModelProto) encodes them,
    in the order a parser lists them; ``None`` where the walk does not find exactly ``count``
    of them (the parsed model's number) or meets what it does not expect."""
    view = memoryview(data)
    found: list[memoryview] = []
    try:
        for number, start, end in fields(view):
            if number != ModelProto.GRAPH_FIELD_NUMBER or start < 0:
                continue
            for inner, s, e in fields(view, start, end):
                if inner == GraphProto.INITIALIZER_FIELD_NUMBER and s >= 0:
                    found.append(view[s:e])
    except ValueError:
        return None
    return found if len(found) == count else None
