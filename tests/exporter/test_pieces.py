"""The writer copies the pieces that view a mapped input file from file to file.

Why: a result's unchanged weights are views of the mapped input; written through the
mapping they cost a fault per page and the input's size in the process's memory, copied by
the kernel they cost neither (exporter/pieces.py). The bytes written must be the views'
bytes whatever the kernel does: copied, refused (another file system), or cut short.
"""

from __future__ import annotations

import errno
import os

import pytest

from onnxopt.exporter import pieces as pieces_module
from onnxopt.exporter.pieces import write_pieces
from onnxopt.importer.load import FileMap, _mapped


def _mapped_file(tmp_path, data: bytes) -> FileMap:
    path = tmp_path / "input.bin"
    path.write_bytes(data)
    with open(path, "rb") as f:
        mapping = _mapped(f)
    assert isinstance(mapping, FileMap) and mapping.source_fd is not None
    return mapping


def _written(tmp_path, parts) -> bytes:
    out = tmp_path / "out.bin"
    with open(out, "wb", buffering=0) as f:
        write_pieces(f.fileno(), parts)
    return out.read_bytes()


def _parts(mapping: FileMap) -> list:
    view = memoryview(mapping)
    # small pieces gathered, a large bytes piece written at once, views of the mapping
    return [b"head", view[10:70_000], b"x" * 3, bytes(range(256)) * 300, view[5:9],
            view[100_000:200_000], b"tail"]


def _expected(mapping: FileMap) -> bytes:
    return b"".join(bytes(p) for p in _parts(mapping))


def test_views_of_the_mapped_file_are_copied_by_the_kernel(tmp_path, monkeypatch):
    mapping = _mapped_file(tmp_path, os.urandom(250_000))
    copied = []
    real = os.copy_file_range

    def counting(src, dst, count, offset_src=None, offset_dst=None):
        n = real(src, dst, count, offset_src)
        copied.append(n)
        return n

    monkeypatch.setattr(os, "copy_file_range", counting)
    assert _written(tmp_path, _parts(mapping)) == _expected(mapping)
    assert sum(copied) == (70_000 - 10) + 4 + 100_000


@pytest.mark.parametrize("refusal", [errno.EXDEV, errno.ENOSYS, errno.EINVAL])
def test_a_refused_copy_writes_the_same_bytes(tmp_path, monkeypatch, refusal):
    mapping = _mapped_file(tmp_path, os.urandom(250_000))

    tries = []

    def refused(*args):
        tries.append(args)
        raise OSError(refusal, os.strerror(refusal))

    monkeypatch.setattr(os, "copy_file_range", refused)
    assert _written(tmp_path, _parts(mapping)) == _expected(mapping)
    assert len(tries) == 1  # refused once (another file system): not asked again


def test_a_copy_cut_short_is_finished_from_the_view(tmp_path, monkeypatch):
    mapping = _mapped_file(tmp_path, os.urandom(250_000))
    real = os.copy_file_range
    calls = []

    def short(src, dst, count, offset_src=None, offset_dst=None):
        calls.append(count)
        if len(calls) % 2 == 0:
            return 0  # the kernel says it copied nothing more
        return real(src, dst, min(count, 1000), offset_src)

    monkeypatch.setattr(os, "copy_file_range", short)
    assert _written(tmp_path, _parts(mapping)) == _expected(mapping)


def test_the_file_mapped_is_read_even_after_its_path_is_replaced(tmp_path):
    data = os.urandom(250_000)
    mapping = _mapped_file(tmp_path, data)
    replacement = tmp_path / "other.bin"
    replacement.write_bytes(b"\0" * 250_000)
    os.replace(replacement, tmp_path / "input.bin")  # what onnxopt -o input.onnx itself does
    assert _written(tmp_path, _parts(mapping)) == _expected(mapping)
    assert _expected(mapping)[4:4 + 69_990] == data[10:70_000]


def test_plain_bytes_and_other_buffers_are_written_as_they_are(tmp_path):
    parts = [b"a" * 10, memoryview(b"b" * 100_000), bytearray(b"c" * 5)]
    assert _written(tmp_path, parts) == b"a" * 10 + b"b" * 100_000 + b"c" * 5
    assert pieces_module._file_range(memoryview(b"plain")) is None


def test_a_view_of_wider_items_is_written_by_its_bytes(tmp_path):
    import numpy as np

    floats = np.arange(20_000, dtype=np.float32)
    parts = [b"h", memoryview(floats), memoryview(floats[:3])]
    assert _written(tmp_path, parts) == b"h" + floats.tobytes() + floats[:3].tobytes()
