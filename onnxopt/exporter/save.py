"""Writing a model to disk atomically, with its external data.

Nothing is written at the destination until everything is ready: the model
(and its data file, if any) go to temporary files in the destination folder
and are renamed into place last, so a failure leaves either the old state or
the complete new one. Weights that were external in the input are streamed
from their source file to the new data file chunk by chunk; a model over
2 GB, which protobuf cannot serialise, has its large weights moved out too.

Nothing is left behind either: every temporary file (or folder) is made inside the ``try``
that removes it on any failure (a full disk, a folder that refuses it, an interruption), and
is listed until it is put in place or removed. The command line turns SIGTERM into an
exception as Python turns SIGINT into one (:func:`onnxopt.cli.run`), so the ``finally``
clauses run, and as it ends it removes whatever is still listed
(:func:`remove_temporaries`): a signal that lands between two steps, after a file was made
and before the step that owns it began its ``try``, leaves nothing either.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

from onnx import ModelProto, TensorProto, numpy_helper

from onnxopt.errors import UsageError
from onnxopt.exporter.destination import check_destination
from onnxopt.exporter.pieces import write_pieces
from onnxopt.exporter.serialize import model_parts
from onnxopt.ir.tensor import LazyTensor, stored_size

# The location the exporter gives an external tensor it has not written yet (its bytes stay
# where the input had them until save_model streams them to the output's data file).
EXTERNAL_MARK = "__onnxopt_external__"
PROTOBUF_LIMIT = 2**31 - 1
EXTERNAL_THRESHOLD = 1024  # bytes: smaller tensors stay inline, as onnx's own saver does
_ALIGN = 64

# Temporary files and folders this process made and has not put in place or removed yet, each
# with the pid of the process that made it (a forked child must not remove its parent's).
_temporaries: dict[str, int] = {}

# A test hook: where this environment variable names a point of :func:`pause_point`, the
# process stops there a while, for a test to signal it exactly then.
PAUSE_ENV = "ONNXOPT_TEST_PAUSE_AT"


class StagedFile:
    """Bytes already written to a temporary file beside ``path``, not yet in place:
    :meth:`commit` renames it there, :meth:`discard` removes it. The safeguard stages its
    result's bytes while its checks run, so the write costs nothing after them."""

    def __init__(self, tmp: str, path: str) -> None:
        self.tmp: str | None = tmp
        self.path = path

    def commit(self) -> None:
        if self.tmp is not None:
            _put_in_place(self.tmp, self.path)
            self.tmp = None

    def discard(self) -> None:
        if self.tmp is not None:
            _unlink_quiet(self.tmp)
            self.tmp = None


def stage_bytes(data: bytes | Sequence[bytes], path: str) -> StagedFile:
    """``data`` (bytes, or pieces written one after the other) in a temporary file beside
    ``path`` (a one-line error if it cannot be)."""
    path = _writable_destination(path)
    tmp = None
    try:
        tmp = _temp_beside(path)
        with _open_temp(tmp, buffering=0) as f:
            write_pieces(f.fileno(), [data] if isinstance(data, bytes) else data)
    except BaseException as e:
        if tmp is not None:
            _unlink_quiet(tmp)
        if isinstance(e, OSError):
            raise UsageError(f"{path}: cannot write output: {e.strerror or e}") from e
        raise
    pause_point("staged")  # handed on, the caller removes it; until then, remove_temporaries
    return StagedFile(tmp, path)


def write_atomically(path: str, write: Callable[[BinaryIO], None]) -> None:
    """``write(f)`` into a temporary file beside ``path``, renamed into place once it returns
    (a JSON report, ``run``'s outputs); on any failure nothing is left and ``path`` is as it
    was."""
    path = _writable_destination(path)
    tmp = None
    try:
        tmp = _temp_beside(path)
        with _open_temp(tmp) as f:
            write(f)
        pause_point("small-file")
        _put_in_place(tmp, path)
        tmp = None
    except OSError as e:
        raise UsageError(f"{path}: cannot write: {e.strerror or e}") from e
    finally:
        if tmp is not None:
            _unlink_quiet(tmp)


class TrialFolder:
    """A hidden folder beside ``path`` where a result is written under its final name, with
    its external data, and checked (``optimize --verify``) before it is put in place:
    :meth:`commit` moves its files into ``path``'s folder, the model last, and
    :meth:`discard` removes whatever is left. A data file's location is its name alone, so
    the model reads the same in either folder."""

    def __init__(self, path: str) -> None:
        self.final = _writable_destination(path)
        try:
            with signals_held():
                self.folder = tempfile.mkdtemp(prefix=f".{os.path.basename(self.final)}.",
                                               suffix=".tmp", dir=os.path.dirname(self.final))
                _temporaries[self.folder] = os.getpid()
        except OSError as e:
            raise UsageError(f"{self.final}: cannot write output: {e.strerror or e}") from e
        self.path = os.path.join(self.folder, os.path.basename(self.final))

    def inside(self, path: str) -> str:
        """Where the file ``path`` of the final folder is found in this one."""
        return os.path.join(os.path.realpath(self.folder), os.path.basename(path))

    def commit(self) -> None:
        names = sorted(os.listdir(self.folder), key=lambda n: n == os.path.basename(self.path))
        with signals_held():  # all of them, or none as far as an interruption goes
            for name in names:
                os.replace(os.path.join(self.folder, name),
                           os.path.join(os.path.dirname(self.final), name))
            self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        _temporaries.pop(self.folder, None)


def remove_temporaries() -> None:
    """Remove every temporary file or folder this process made and did not put in place or
    remove (what an interruption at the wrong moment left); the command line calls it as it
    ends."""
    with signals_held():
        for path, pid in list(_temporaries.items()):
            if pid != os.getpid():
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            _temporaries.pop(path, None)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back until the block ends (then delivered): the steps inside
    (making a temporary file and listing it, renaming a data file and its model) happen
    together as far as an interruption goes."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def pause_point(name: str) -> None:
    """A test hook, inert unless ``ONNXOPT_TEST_PAUSE_AT`` names this point: the process then
    says ``onnxopt: paused at NAME`` on stderr and sleeps (a minute at most) for a test to
    signal it there (tests/commands/test_interrupted.py). The points: ``staged`` (the
    safeguard's bytes written beside the output), ``data-file`` and ``model-file`` (the
    writer's temporaries), ``small-file`` (a report's), ``verify`` (a result written to its
    trial folder, before ``--verify`` runs)."""
    if os.environ.get(PAUSE_ENV) == name:
        sys.stderr.write(f"onnxopt: paused at {name}\n")
        sys.stderr.flush()
        time.sleep(60)


def save_model(proto: ModelProto, external: dict[str, LazyTensor], path: str, *,
               use_external: bool = False, protected: frozenset[str] = frozenset(),
               serialized: bytes | None = None, staged: StagedFile | None = None,
               encoded: dict[int, memoryview] | None = None,
               left_out: dict[int, memoryview] | None = None) -> None:
    """Write ``proto`` to ``path`` atomically (``serialized``: its bytes, where the caller
    has them, and ``staged``: those bytes already written beside ``path``; either is used
    when every tensor stays inline, as then the file is exactly those bytes; ``encoded``:
    initializers whose bytes are at hand, written as they are, see
    :func:`onnxopt.exporter.serialize.model_parts`; ``left_out``: raw data left out of
    those messages, by position, :func:`onnxopt.exporter.build.export_model_encoded`).

    ``external`` maps placeholder tensors to their lazy source. With
    ``use_external`` (or when the model would pass protobuf's 2 GB limit)
    every tensor of at least 1 KB goes to ``<path>.data``. ``protected``
    lists real paths that must not be overwritten (the input's own files).
    """
    try:
        _save(proto, external, _writable_destination(path), use_external, protected,
              serialized, staged, encoded, left_out or {})
    finally:
        if staged is not None:
            staged.discard()  # a no-op once committed


def _writable_destination(path: str) -> str:
    return check_destination(path)


def _save(proto: ModelProto, external: dict[str, LazyTensor], path: str, use_external: bool,
          protected: frozenset[str], serialized: bytes | None,
          staged: StagedFile | None, encoded: dict[int, memoryview] | None,
          left_out: dict[int, memoryview]) -> None:
    tensors = list(_all_initializers(proto))
    if not use_external and not external:
        inline_size = sum(stored_size(t) for t in tensors) + sum(
            len(raw) for raw in left_out.values())  # the 64 MB slack covers headers
        use_external = inline_size > PROTOBUF_LIMIT - (1 << 26)
    data_tmp = data_path = model_tmp = None
    try:
        if use_external or external:
            restore_left_out(proto, left_out)  # the data file is written from the messages
            data_path = _data_file_name(path, protected)
            data_tmp = _temp_beside(data_path)
            with _open_temp(data_tmp) as f:
                wrote = _write_data_file(tensors, external, f, os.path.basename(data_path),
                                         use_external)
            if not wrote:
                _unlink_quiet(data_tmp)
                data_tmp = None
            pause_point("data-file")
        if staged is not None and data_path is None and staged.path == path:
            staged.commit()
            return
        model_tmp = _temp_beside(path)
        with _open_temp(model_tmp, buffering=0) as f:
            if serialized is not None and data_path is None:
                write_pieces(f.fileno(), [serialized])
            else:  # in pieces: joined, they would be one more copy of every weight
                write_pieces(f.fileno(),
                             model_parts(proto, encoded if data_path is None else None))
        pause_point("model-file")
        with signals_held():  # the data file and the model that reads it, together
            if data_tmp is not None:
                _put_in_place(data_tmp, data_path)
                data_tmp = None
            _put_in_place(model_tmp, path)
            model_tmp = None
    except OSError as e:
        raise UsageError(f"{path}: cannot write output: {e.strerror or e}") from e
    finally:
        for tmp in (data_tmp, model_tmp):
            if tmp is not None:
                _unlink_quiet(tmp)


def restore_left_out(proto: ModelProto, left_out: dict[int, memoryview]) -> None:
    """Put the raw data left out of ``proto``'s main-graph initializers (by position, as
    :func:`onnxopt.exporter.build.export_model_encoded` gives it) back into them, a copy of
    those weights, and empty ``left_out``."""
    for position, raw in left_out.items():
        proto.graph.initializer[position].raw_data = bytes(raw)
    left_out.clear()


def inline_external(proto: ModelProto, external: dict[str, LazyTensor]) -> None:
    """Replace placeholders with the tensors' bytes (for in-memory use of small models)."""
    for t in _all_initializers(proto):
        if _is_placeholder(t):
            src = external[t.name]
            t.data_location = TensorProto.DEFAULT
            del t.external_data[:]
            t.raw_data = b"".join(src.raw_chunks())


def _write_data_file(tensors: list[TensorProto], external: dict[str, LazyTensor], f: BinaryIO,
                     location: str, move_large: bool) -> bool:
    """Write the data file's bytes to ``f`` (named ``location`` beside the model), pointing the
    tensors that go out at them; whether any went out."""
    offset = 0
    wrote = False
    for t in tensors:
        if _is_placeholder(t) and 0 < _source_size(external[t.name]) < EXTERNAL_THRESHOLD:
            # Small tensors (shapes, axes) go inline, as onnx's own saver does: shape
            # inference (and onnx.checker's full check) cannot read external ones.
            t.data_location = TensorProto.DEFAULT
            del t.external_data[:]
            t.raw_data = b"".join(external[t.name].raw_chunks())
            continue
        if _is_placeholder(t):
            chunks = external[t.name].raw_chunks()
        elif move_large and t.data_location != TensorProto.EXTERNAL and stored_size(t) >= EXTERNAL_THRESHOLD:
            data = _readable_bytes(t)
            if data is None:
                continue  # numbers onnxopt cannot read (segments, an unknown type): as they were
            chunks = iter([data])
            _clear_data(t)
        else:
            continue
        pad = (-offset) % _ALIGN
        if pad:
            f.write(b"\0" * pad)
            offset += pad
        length = 0
        for chunk in chunks:
            f.write(chunk)
            length += len(chunk)
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        t.external_data.add(key="location", value=location)
        t.external_data.add(key="offset", value=str(offset))
        t.external_data.add(key="length", value=str(length))
        offset += length
        wrote = True
    return wrote


def _source_size(tensor: LazyTensor) -> int:
    """Bytes of an external tensor: its recorded length, else what its type and shape need."""
    loc = tensor.external
    return loc.length if loc is not None and loc.length is not None else tensor.nbytes


def _is_placeholder(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == EXTERNAL_MARK for e in t.external_data)


def _raw_bytes(t: TensorProto) -> bytes:
    if t.HasField("raw_data"):
        return t.raw_data

    arr = numpy_helper.to_array(t)
    return arr.astype(arr.dtype.newbyteorder("<")).tobytes()


def _readable_bytes(t: TensorProto) -> bytes | None:
    """The tensor's little-endian bytes, or None where its numbers cannot be read as one
    block (segments, which ONNX Runtime ignores and onnx cannot load; an unknown type)."""
    if t.HasField("segment"):
        return None
    try:
        return _raw_bytes(t)
    except (ValueError, TypeError, KeyError):
        return None


def _clear_data(t: TensorProto) -> None:
    for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                  "uint64_data", "string_data"):
        t.ClearField(field)


def _all_initializers(proto: ModelProto):
    stack = [proto.graph]
    while stack:
        g = stack.pop()
        yield from g.initializer
        for node in g.node:
            for a in node.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)


def _data_file_name(path: str, protected: frozenset[str]) -> str:
    base = path + ".data"
    candidate, n = base, 0
    while os.path.realpath(candidate) in protected:
        n += 1
        candidate = f"{path}.{n}.data"
    return candidate


def _temp_beside(path: str) -> str:
    """A new empty file beside ``path``, listed in :data:`_temporaries` as it is made."""
    with signals_held():
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                   dir=os.path.dirname(path))
        _temporaries[tmp] = os.getpid()
    try:
        # mkstemp makes the file private (0600); the output should get the usual mode.
        os.fchmod(fd, _file_mode())
    except BaseException:
        _unlink_quiet(tmp)
        raise
    finally:
        os.close(fd)
    return tmp


def _put_in_place(tmp: str, path: str) -> None:
    os.replace(tmp, path)
    _temporaries.pop(tmp, None)


def _open_temp(tmp: str, buffering: int = -1):
    """The file :func:`_temp_beside` made, opened to be written: not truncated, as it is empty.
    On ext4 (``auto_da_alloc``, on by default) a file truncated to nothing is written out to
    disk when it is closed (it may be a file being replaced in place), which took 45 ms of the
    24-layer GPT-2's 78 MB output (benchmarks/RESULTS.md); a rename over an existing output
    still does the same, and is left to do so."""
    return os.fdopen(os.open(tmp, os.O_WRONLY), "wb", buffering=buffering)


def _file_mode() -> int:
    """The mode ``open()`` would give a new file: 0666 less the process umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
    _temporaries.pop(path, None)
