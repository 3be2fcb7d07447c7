"""The model the checks load: the staged result, its large raw data read from the staged file.

Loading a result whole costs ONNX Runtime and the ONNX checker a read and a parse of every
weight: on the 24-layer GPT-2 (78 MB) ORT's load took 0.47 s and the checker's 0.16 s, where
the same model with its weights as external data took 0.28 s and 0.04 s (benchmarks/RESULTS.md).
The checks need the weights' bytes only as ORT will read them, and those are in the staged
file already. So the checks load a light copy written beside it: the same messages, but
each large raw data field replaced by an external data reference (``location``: the staged
file, ``offset`` and ``length``: where those very bytes lie in it). Both then read exactly
the bytes the user's file holds and parse only the graph.

A tensor whose encoding says more than its raw data (external data or a data location of
its own, raw data given twice) stays inline, as do small ones (shape vectors: inference and
the checker read them). Where nothing would be lighter, or the copy cannot be written, the
checks load the staged file itself.
"""

from __future__ import annotations

import os

from onnx import StringStringEntryProto, TensorProto

from onnxopt.exporter.serialize import model_parts
from onnxopt.importer.wire import STRIPPED_MIN_BYTES, large_raw_data
from onnxopt.ir.wire import encode_varint, field_key

LIGHT_SUFFIX = ".light"
_EXTERNAL_DATA_KEY = field_key(TensorProto.EXTERNAL_DATA_FIELD_NUMBER)
_DATA_LOCATION_EXTERNAL = field_key(TensorProto.DATA_LOCATION_FIELD_NUMBER,
                                    length_delimited=False) + encode_varint(TensorProto.EXTERNAL)


def write_light_copy(staged: str, proto, layout: dict[int, tuple[int, bytes | memoryview]]
                     ) -> str | None:
    """Write the light copy of ``staged`` (which holds ``proto``'s bytes; ``layout``: where each
    initializer's encoding lies in it, as :func:`onnxopt.exporter.serialize.model_parts` gives
    it) beside it, and return its path; ``None`` where none was written."""
    location = os.path.basename(staged)
    references: dict[int, bytes] = {}
    for position, (offset, data) in layout.items():
        view = memoryview(data)
        try:
            raw = large_raw_data(view, 0, len(view), STRIPPED_MIN_BYTES)
        except ValueError:
            raw = None
        if raw is not None:
            references[position] = _referenced(view, raw, location, offset)
    if not references:
        return None
    path = staged + LIGHT_SUFFIX
    try:
        parts = model_parts(proto, references)
        with open(path, "xb") as f:  # beside the staged file, which has a name of its own
            f.writelines(parts)
    except (OSError, ValueError):
        discard(path)
        return None
    return path


def discard(path: str | None) -> None:
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


def _referenced(view: memoryview, raw: tuple[int, int, int], location: str, at: int) -> bytes:
    """The tensor encoded in ``view`` with its raw data field (``raw``: field start, payload
    start, field end) replaced by a reference to those bytes at offset ``at + payload start``
    of ``location``."""
    begin, start, end = raw
    entries = b"".join(
        _EXTERNAL_DATA_KEY + encode_varint(len(entry)) + entry
        for entry in (StringStringEntryProto(key=key, value=value).SerializeToString()
                      for key, value in (("location", location), ("offset", str(at + start)),
                                         ("length", str(end - start)))))
    return bytes(view[:begin]) + bytes(view[end:]) + entries + _DATA_LOCATION_EXTERNAL
