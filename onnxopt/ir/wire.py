"""Reading protobuf's wire format just far enough to find fields, never copying a payload.

protobuf's Python API hands a message's bytes out only by encoding it (and its raw data only
as a copy). Where onnxopt needs to know where a field lies in bytes it already holds (the
input file's initializers, :mod:`onnxopt.importer.wire`) or what one short field of an
encoded message says (:mod:`onnxopt.exporter.serialize`), it walks the fields here, each
skipped by its length. Anything that is not well-formed raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Iterator

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


def fields(view: memoryview, start: int = 0, end: int | None = None
           ) -> Iterator[tuple[int, int, int]]:
    """(field number, payload start, payload end) of each field of the message encoded in
    ``view[start:end]``; start and end ``-1`` for a field that is not length-delimited."""
    for number, _, payload, field_end in spans(view, start, end):
        yield number, payload, field_end if payload >= 0 else -1


def spans(view: memoryview, start: int = 0, end: int | None = None
          ) -> Iterator[tuple[int, int, int, int]]:
    """(field number, field start, payload start, field end) of each field of the message
    encoded in ``view[start:end]``: the field's key starts it, and a length-delimited
    field's payload runs from its payload start to its end (payload start ``-1`` for a
    field that is not length-delimited). What rewrites a message (leaving a field out,
    :mod:`onnxopt.importer.wire`) copies the bytes between fields as they are."""
    end = len(view) if end is None else end
    i = start
    try:
        while i < end:
            begin = i
            key, i = _varint(view, i)
            kind = key & 7
            if kind == _LENGTH_DELIMITED:
                length, i = _varint(view, i)
                if i + length > end:
                    raise ValueError("a field runs past its message")
                yield key >> 3, begin, i, i + length
                i += length
                continue
            if kind == _VARINT:
                _, i = _varint(view, i)
            elif kind == _FIXED64:
                i += 8
            elif kind == _FIXED32:
                i += 4
            else:  # groups (deprecated) or a corrupt key
                raise ValueError(f"wire type {kind}")
            if i > end:
                raise ValueError("a field runs past its message")
            yield key >> 3, begin, -1, i
    except IndexError:
        raise ValueError("the message ends inside a field") from None
    if i != end:
        raise ValueError("a field runs past its message")


def field_key(number: int, length_delimited: bool = True) -> bytes:
    """The key that starts field ``number`` of a message: length-delimited (a message, bytes,
    a string), or else a varint."""
    return encode_varint(number << 3 | (_LENGTH_DELIMITED if length_delimited else _VARINT))


def encode_varint(n: int) -> bytes:
    """``n`` as protobuf's varint (``n`` >= 0)."""
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def last_string(view: memoryview, number: int) -> bytes | None:
    """The bytes of field ``number`` as a parser keeps it (the last one given), or ``None``."""
    found = None
    for field, start, end in fields(view):
        if field == number and start >= 0:
            found = bytes(view[start:end])
    return found


def _varint(view: memoryview, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = view[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")
