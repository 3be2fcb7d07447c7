"""Reading an ONNX file safely.

Everything that can be wrong with a file before it is even a graph is caught
here and reported as one line: a missing or unreadable file, bytes that are
not an ONNX protobuf, an IR version or opset outside what onnxopt supports,
and external data that is missing or lies outside the model's folder (an
absolute path, ``..`` or a symlink out: a model file must not make a tool read
arbitrary files).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import sys
import weakref
from dataclasses import dataclass

import numpy as np
import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError
from onnx import ModelProto, SparseTensorProto, TensorProto

from onnxopt.errors import ModelError, UsageError
from onnxopt.importer.wire import STRIPPED_MIN_BYTES, strip_raw_data
from onnxopt.ir.dtypes import dtype_name, numpy_dtype
from onnxopt.ir.node import STANDARD_DOMAINS
from onnxopt.ir.tensor import ExternalLocation, LazyTensor, stored_size

_STRING, _MESSAGE = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE
_BULKY = (TensorProto.DESCRIPTOR, SparseTensorProto.DESCRIPTOR)  # raw data: not to be listed
# Strings have no fixed size; 4-bit types pack two elements per byte.
_UNSIZED = frozenset({"string", "int4", "uint4", "float4e2m1"})


def max_opset() -> int:
    return onnx.defs.onnx_opset_version()


def read_model_proto(path: str, *, fix_text: bool = True) -> ModelProto:
    """Parse ``path`` without loading external data; raise a one-line error on failure.
    ``fix_text=False`` leaves text that is not UTF-8 to the caller (the importer looks for it
    while onnx's shape inference runs in its child)."""
    with _opened(path) as f:
        try:
            data = f.read()
        except OSError as e:
            raise ModelError(f"{path}: cannot read: {e.strerror}") from e
    return parse_model_bytes(data, path, fix_text=fix_text)


@dataclass(frozen=True)
class MappedModel:
    """A model file mapped into memory and parsed without its large raw data (the importer's
    read, :func:`map_model_file`): ``proto`` lacks the raw data that ``raw`` holds (by
    main-graph initializer position, views of the file's bytes, which keep the mapping
    alive); ``encodings`` are the main graph's initializers' bytes in the file (``None``
    where the walk found none it could trust)."""

    proto: ModelProto
    encodings: list[memoryview] | None
    raw: dict[int, memoryview]


def map_model_file(path: str) -> MappedModel:
    """Read ``path`` as :func:`read_model_proto` does (the same one-line errors; text that is
    not UTF-8 is the caller's to fix), but map it rather than read it, and parse the model
    without its main graph's large raw data (:mod:`onnxopt.importer.wire`): on a 78 MB
    GPT-2, two copies of every weight fewer in fresh memory (the read and protobuf's), which
    took 0.10-0.2 s here. The raw data stays in the mapped file, and the file's weights that
    the pipeline does not change are written from there. A file that cannot be mapped (a
    pipe, a special file) is read."""
    with _opened(path) as f:
        try:
            data = _mapped(f)
            if data is None:
                data = f.read()
        except OSError as e:
            raise ModelError(f"{path}: cannot read: {e.strerror}") from e
    # (Raw data is little-endian: a big-endian host reads it through onnx's helper, whole.)
    stripped = strip_raw_data(data, STRIPPED_MIN_BYTES if sys.byteorder == "little"
                              else None) if data else None
    if stripped is not None:
        skeleton = stripped.skeleton
        proto = parse_model_bytes(_as_bytes(data) if skeleton is None else skeleton, path,
                                  fix_text=False)
        if len(stripped.encodings) == len(proto.graph.initializer):
            return MappedModel(proto, stripped.encodings, stripped.raw)
    # The walk met what it does not expect: parsed whole, as read_model_proto does.
    return MappedModel(parse_model_bytes(_as_bytes(data), path, fix_text=False), None, {})


def _as_bytes(data: bytes | mmap.mmap) -> bytes:
    return data if isinstance(data, bytes) else data[:]


@contextlib.contextmanager
def _opened(path: str):
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory, not an ONNX file")
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        raise ModelError(f"{path}: cannot read: {e.strerror}") from e
    with f:
        yield f


class FileMap(mmap.mmap):
    """A file mapped read-only that keeps its own descriptor of the file (``source_fd``, closed
    when the mapping is collected) and the mapping's address (``address``): the writer copies
    the views of it that a result holds from file to file (:mod:`onnxopt.exporter.pieces`).
    The descriptor is of the very file mapped, so it reads the same bytes even where the path
    has since been given to another file."""

    source_fd: int | None = None
    address: int | None = None


def _mapped(f) -> mmap.mmap | None:
    """``f``'s bytes mapped read-only, or ``None`` where it is not a regular file or cannot be
    mapped (empty, or a file system without mappings)."""
    try:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        mapping = FileMap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        mapping.source_fd = os.dup(f.fileno())
    except OSError:
        return mapping  # written through the mapping, as any other bytes
    weakref.finalize(mapping, os.close, mapping.source_fd)
    mapping.address = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    return mapping


def read_model_with_data(path: str) -> ModelProto:
    """``path`` with its external tensors' bytes inline, each read as ONNX Runtime reads it
    (its recorded length, else the bytes its type and shape need — not, as ``onnx.load``
    does, the rest of the file). A tensor whose data cannot be read stays as it was."""
    proto = read_model_proto(path)
    base = os.path.dirname(os.path.abspath(path))
    for t in _tensors(proto.graph):
        if t.data_location != TensorProto.EXTERNAL or external_problem(t, base) is not None:
            continue
        data = b"".join(LazyTensor.from_proto(t, resolve_external(t, base, path)).raw_chunks())
        t.data_location = TensorProto.DEFAULT
        del t.external_data[:]
        t.raw_data = data
    return proto


def parse_model_bytes(data: bytes, label: str, *, fix_text: bool = True) -> ModelProto:
    if not data:
        raise ModelError(f"{label}: empty file, not an ONNX model")
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelError(f"{label}: not an ONNX model (protobuf parse failed: "
                         f"{_short(e) or 'truncated or corrupt'})") from e
    if not model.HasField("graph"):
        raise ModelError(f"{label}: not an ONNX model (no graph in the protobuf)")
    check_versions(model, label)
    if fix_text and has_undecodable_text(model):
        fix_undecodable_text(model)
    return model


def has_undecodable_text(message) -> bool:
    """Whether a string field holds bytes that are not UTF-8 (protobuf then hands them out as
    ``bytes``, and cannot write them back). Messages list only the fields they hold; tensors
    are read field by field instead, since listing theirs would copy out their raw data."""
    if message.DESCRIPTOR in _BULKY:
        return _tensor_has_undecodable_text(message)
    for field, value in message.ListFields():
        if field.type == _STRING:
            if field.is_repeated:
                try:
                    "".join(value)  # one C-level pass; bytes among the strings raise
                except TypeError:
                    return True
            elif not isinstance(value, str):
                return True
        elif field.type == _MESSAGE:
            if field.is_repeated:
                if any(has_undecodable_text(x) for x in value):
                    return True
            elif has_undecodable_text(value):
                return True
    return False


def _tensor_has_undecodable_text(message) -> bool:
    for name, repeated, is_string in _text_fields(message.DESCRIPTOR):
        if is_string:
            value = getattr(message, name)
            if isinstance(value, bytes) or (repeated and any(isinstance(x, bytes)
                                                             for x in value)):
                return True
        elif repeated:
            if any(has_undecodable_text(x) for x in getattr(message, name)):
                return True
        elif message.HasField(name) and has_undecodable_text(getattr(message, name)):
            return True
    return False


_TEXT_FIELDS: dict = {}


def _text_fields(descriptor) -> list[tuple[str, bool, bool]]:
    """(name, repeated, is a string) of a message type's string and message fields."""
    fields = _TEXT_FIELDS.get(descriptor)
    if fields is None:
        fields = [(f.name, _repeated(f), f.type == _STRING) for f in descriptor.fields
                  if f.type in (_STRING, _MESSAGE)]
        _TEXT_FIELDS[descriptor] = fields
    return fields


def _repeated(field) -> bool:
    return field.is_repeated


def fix_undecodable_text(message) -> None:
    """Decode such bytes with U+FFFD for what is not UTF-8 — every occurrence of the same
    bytes the same way, so names still match — in place."""
    for field, value in message.ListFields():
        if field.type == _STRING:
            if field.is_repeated:
                if any(isinstance(x, bytes) for x in value):
                    fixed = [_text(x) for x in value]
                    del value[:]
                    value.extend(fixed)
            elif isinstance(value, bytes):
                setattr(message, field.name, _text(value))
        elif field.type == _MESSAGE:
            for x in (value if field.is_repeated else [value]):
                fix_undecodable_text(x)


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def check_versions(model: ModelProto, label: str) -> None:
    """Refuse only what no runtime could load: an IR version or an ONNX opset newer than any
    this onnx knows (an old or even a missing IR version loads in ONNX Runtime). Every older opset (ONNX Runtime runs 7 and later, and
    onnxopt keeps what it does not model untouched) and models that import no ONNX domain at
    all (``ai.onnx.ml`` only) go through."""
    if model.ir_version > onnx.IR_VERSION:
        raise ModelError(f"{label}: unsupported IR version {model.ir_version} "
                         f"(newer than {onnx.IR_VERSION}, the newest this onnx knows)")
    for imp in model.opset_import:
        if imp.domain in STANDARD_DOMAINS and imp.version > max_opset():
            raise ModelError(f"{label}: unsupported opset {imp.version} "
                             f"(newer than {max_opset()}, the newest this onnx knows)")


def resolve_external(tensor: TensorProto, base_dir: str | None, label: str) -> ExternalLocation:
    """Validate an external tensor's location and return where its bytes are.

    Refuses absolute paths, any ``..`` component, and paths that resolve
    (through symlinks) outside the model's folder.
    """
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    where = f"{label}: external data for tensor '{tensor.name}'"
    if not location:
        raise ModelError(f"{where} has no location")
    if base_dir is None:
        raise ModelError(f"{where} cannot be resolved: the model was given as bytes, not a path")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location[:3]:
        raise ModelError(f"{where} uses an absolute path '{location}'; refusing to read outside "
                         "the model's folder")
    parts = location.replace("\\", "/").split("/")
    if ".." in parts:
        raise ModelError(f"{where} points outside the model's folder ('{location}')")
    root = os.path.realpath(base_dir)
    full = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, full]) != root:
        raise ModelError(f"{where} is a symlink out of the model's folder ('{location}')")
    if not os.path.isfile(full):
        raise ModelError(f"{where} is missing: '{location}' not found next to the model")
    try:
        offset = int(info.get("offset", 0) or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError:
        raise ModelError(f"{where} has a non-integer offset or length") from None
    if offset < 0 or (length is not None and length < 0):
        raise ModelError(f"{where} has a negative offset or length")
    expected = _expected_nbytes(tensor)
    if length is not None and expected is not None and length != expected:
        raise ModelError(f"{where} has length {length}, but its type and shape need "
                         f"{expected} bytes")
    need = offset + (length if length is not None else (expected or 0))
    size = os.path.getsize(full)
    if need > size:
        raise ModelError(f"{where} is truncated: '{location}' has {size} bytes, needs {need}")
    # Without a length, ONNX Runtime reads the bytes the type and shape need (not the rest of
    # the file), and so does onnxopt.
    return ExternalLocation(full, offset, length if length is not None else expected)


def external_problem(tensor: TensorProto, base_dir: str | None) -> str | None:
    """Why an external tensor's data cannot be read (the message :func:`resolve_external`
    would raise), or None."""
    try:
        resolve_external(tensor, base_dir, "")
    except ModelError as e:
        return str(e)
    return None


def _expected_nbytes(tensor: TensorProto) -> int | None:
    """Bytes a tensor's raw data must have (``None`` where that is not a fixed multiple)."""
    name = dtype_name(tensor.data_type)
    if name is None or name in _UNSIZED:
        return None
    try:
        itemsize = numpy_dtype(name).itemsize
    except (TypeError, ValueError, KeyError):
        return None
    count = 1
    for d in tensor.dims:
        count *= d
    return count * itemsize


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:120] if text else ""


def tensor_bytes(proto: ModelProto, external: dict | None = None, *,
                 raw_lengths: dict[str, int] | None = None,
                 left_out: dict[int, memoryview] | None = None) -> int:
    """Bytes of every initializer and tensor attribute, subgraphs included; an external
    tensor counts its recorded length (or, for an exporter placeholder, the length of its
    source in ``external``). ``raw_lengths``: :func:`raw_lengths` of the main graph, where the
    caller has them; ``left_out``: raw data left out of the main graph's initializers, by
    position (:class:`MappedModel`, and the pipeline's results)."""
    known = raw_lengths or {}
    left_out = left_out or {}
    total = 0
    for position, t in enumerate(proto.graph.initializer):
        length = len(left_out[position]) if position in left_out else known.get(t.name)
        total += length if length is not None else _weight(t, external)
    for t in _tensors(proto.graph, initializers=False):
        total += _weight(t, external)
    return total


def raw_lengths(graph: onnx.GraphProto, left_out: dict[int, memoryview] | None = None
                ) -> dict[str, int]:
    """The length of the raw data of each of ``graph``'s own initializers that holds its bytes
    inline as raw data, by name (a name given twice is left out). protobuf hands raw data out
    only as a copy, so each such count copies the tensor's bytes: 20-30 ms on the 24-layer
    GPT-2's 78 MB. The importer counts once, for the source's weight (:func:`tensor_bytes`)
    and for each initializer's check (:func:`tensor_problem`). ``left_out``: raw data left
    out of the messages, by initializer position (:class:`MappedModel`)."""
    left_out = left_out or {}
    lengths: dict[str, int] = {}
    seen: set[str] = set()
    for position, t in enumerate(graph.initializer):
        if t.name in seen:
            lengths.pop(t.name, None)
            continue
        seen.add(t.name)
        if position in left_out:
            lengths[t.name] = len(left_out[position])
        elif t.data_location != TensorProto.EXTERNAL and t.HasField("raw_data"):
            lengths[t.name] = len(t.raw_data)
    return lengths


def _weight(t: TensorProto, external: dict | None) -> int:
    if t.data_location != TensorProto.EXTERNAL:
        return stored_size(t)
    src = (external or {}).get(t.name)
    info = {e.key: e.value for e in t.external_data}
    try:
        return src.nbytes if src is not None else int(
            info.get("length") or _expected_nbytes(t) or 0)
    except ValueError:
        return 0  # a malformed length: import refuses the file with a reason


def has_external_data(graph: onnx.GraphProto) -> bool:
    """Whether a tensor of ``graph`` (initializers, sparse ones, attributes, subgraphs) keeps
    its bytes in an external file."""
    return any(t.data_location == TensorProto.EXTERNAL for t in _tensors(graph))


def _tensors(graph: onnx.GraphProto, *, initializers: bool = True):
    if initializers:
        yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _tensors(a.g)
            for g in a.graphs:
                yield from _tensors(g)


_TYPED_FIELDS = {  # element type -> (field holding its values, values per element)
    TensorProto.FLOAT: ("float_data", 1), TensorProto.COMPLEX64: ("float_data", 2),
    TensorProto.DOUBLE: ("double_data", 1), TensorProto.COMPLEX128: ("double_data", 2),
    TensorProto.INT64: ("int64_data", 1), TensorProto.UINT32: ("uint64_data", 1),
    TensorProto.UINT64: ("uint64_data", 1), TensorProto.STRING: ("string_data", 1),
    **{t: ("int32_data", 1) for t in (
        TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT8,
        TensorProto.UINT16, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.BFLOAT16)},
}


def tensor_problem(t: TensorProto, raw_length: int | None = None) -> str | None:
    """Why onnxopt cannot read a tensor's numbers, or None. Checked without reading them:
    an element type NumPy has no equivalent for, segments, data whose size does not fit
    the type and shape. Such a tensor is kept as it is and no pass reads it. ``raw_length``:
    the length of its raw data, where the caller has counted it (:func:`raw_lengths`)."""
    if t.HasField("segment"):
        return "it is stored in segments"
    name = dtype_name(t.data_type)
    if name is None or name.startswith("type"):
        return f"element type {t.data_type} is unknown"
    if t.data_location == TensorProto.EXTERNAL:
        return None  # its length is checked where its location is resolved
    count = 1
    for d in t.dims:
        if d < 0:
            return "it has a negative dimension"
        count *= d
    if raw_length is not None or t.HasField("raw_data"):
        expected = _expected_nbytes(t)
        if expected is None:
            return None
        length = len(t.raw_data) if raw_length is None else raw_length
        if length != expected:
            return f"{length} bytes of data where its type and shape need {expected}"
        return None
    field, per = _TYPED_FIELDS.get(t.data_type, (None, 1))
    if field is None:
        return None if count == 0 else "its element type has no typed field"
    have = len(getattr(t, field))
    if have != count * per:
        return f"{have} values where its type and shape need {count * per}"
    return None
