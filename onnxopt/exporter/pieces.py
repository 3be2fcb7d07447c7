"""Writing a model's bytes, given in pieces, to a file; the pieces that lie in a mapped input
file are copied from that file by the kernel.

Most of a result's bytes are the input's own: every initializer the pipeline leaves as it was
is written as the input file encodes it, a view of the mapped file
(:func:`onnxopt.importer.load.map_model_file`). Written with ``write()``, each such view is
read through the mapping: the kernel faults every page of the input into this process (the
78 MB of a 24-layer GPT-2 became 70 MB of its peak memory) and copies it through the
process. ``os.copy_file_range`` copies the same bytes from the input file to the output
inside the kernel; on the 24-layer GPT-2 the write took 0.034 s against 0.066 s (medians of
8, benchmarks/RESULTS.md). A mapped view is known by the object it views: the importer's
:class:`~onnxopt.importer.load.FileMap`, which keeps the file's descriptor (``source_fd``)
and the mapping's address (``address``). Where the kernel cannot copy (another operating
system, a file system that refuses), the view is written as any other piece: the bytes are
the same either way.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable

import numpy as np

_DIRECT_MIN_BYTES = 1 << 16  # a piece this large is written at once, not gathered first
_COPY_REFUSED = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF,
                 errno.EPERM, errno.ETXTBSY, errno.EIO}


def write_pieces(fd: int, pieces: Iterable[bytes | memoryview]) -> None:
    """Write ``pieces`` one after the other at ``fd``'s offset (an unbuffered descriptor: the
    kernel's copies move that offset, which a buffered writer would not see)."""
    gathered: list[bytes | memoryview] = []
    size = 0
    copies = True  # until the kernel refuses one: then it would refuse them all (EXDEV, ENOSYS)
    for piece in pieces:
        source = _file_range(piece) if copies else None
        nbytes = memoryview(piece).nbytes
        if source is None and nbytes < _DIRECT_MIN_BYTES:
            gathered.append(piece)
            size += nbytes
            if size >= _DIRECT_MIN_BYTES:
                _write_all(fd, b"".join(gathered))
                gathered, size = [], 0
            continue
        if gathered:
            _write_all(fd, b"".join(gathered))
            gathered, size = [], 0
        copied, refused = _copy_range(source, fd, nbytes) if source is not None else (0, False)
        copies = copies and not refused
        if copied < nbytes:
            _write_all(fd, memoryview(piece).cast("B")[copied:])
    if gathered:
        _write_all(fd, b"".join(gathered))


def _file_range(piece: bytes | memoryview) -> tuple[int, int] | None:
    """(descriptor, offset) of the file bytes ``piece`` views, where it views a mapped file."""
    if not isinstance(piece, memoryview) or not len(piece) or not hasattr(os, "copy_file_range"):
        return None
    mapping = piece.obj
    fd = getattr(mapping, "source_fd", None)
    base = getattr(mapping, "address", None)
    if fd is None or base is None or not piece.contiguous or piece.itemsize != 1:
        return None
    offset = np.frombuffer(piece, dtype=np.uint8).ctypes.data - base
    if not 0 <= offset <= len(mapping) - len(piece):
        return None
    return fd, offset


def _copy_range(source: tuple[int, int], fd: int, length: int) -> tuple[int, bool]:
    """Bytes copied by the kernel from ``source`` to ``fd`` (fewer than ``length`` where it
    stopped: the caller writes the rest itself), and whether it refused to copy."""
    src, offset = source
    done = 0
    while done < length:
        try:
            n = os.copy_file_range(src, fd, length - done, offset + done)
        except OSError as e:
            if e.errno in _COPY_REFUSED:
                return done, True
            raise
        if n <= 0:
            return done, False
        done += n
    return done, False


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.write(fd, view)
        view = view[n:]
