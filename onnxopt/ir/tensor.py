"""Constant tensors that load their numbers only when a pass needs them.

A weight in an ONNX file is either embedded in the protobuf (already in memory
once the file is parsed) or stored in an external data file next to the model.
:class:`LazyTensor` keeps a reference to either form. Reading ``dtype`` or
``shape`` never touches the data; ``numpy()`` reads it, and the exporter can
copy external bytes to a new file in chunks without ever holding a whole
weight in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, numpy_helper

from onnxopt.errors import ModelError
from onnxopt.ir.dtypes import dtype_name, from_numpy, numpy_dtype


def stored_size(t: TensorProto) -> int:
    """Bytes a TensorProto's numbers take in the message: its raw data's length, else the
    message's size (typed fields). Not ``ByteSize`` for raw data: upb serializes the tensor
    to count it."""
    return len(t.raw_data) if t.HasField("raw_data") else t.ByteSize()


@dataclass(frozen=True, slots=True)
class ExternalLocation:
    """Where an external tensor's bytes lie: an already-validated absolute path, offset, length."""

    path: str
    offset: int
    length: int | None


class LazyTensor:
    """A constant's value: a TensorProto, an external file region, or a NumPy array.

    Exactly one of the three backs it. Nothing is read from disk until
    :meth:`numpy` or :meth:`raw_chunks` is called.
    """

    __slots__ = ("_array", "_external", "_proto", "dtype", "encoded", "raw", "shape")

    def __init__(
        self,
        dtype: str,
        shape: tuple[int, ...],
        *,
        proto: TensorProto | None = None,
        external: ExternalLocation | None = None,
        array: np.ndarray | None = None,
    ) -> None:
        self.dtype = dtype
        self.shape = tuple(shape)
        self._proto = proto
        self._external = external
        self._array = array
        # The proto's bytes exactly as the input file holds them (a main-graph initializer
        # read from a file, :mod:`onnxopt.importer.wire`): written as they are, not encoded
        # again. ``None`` where not known.
        self.encoded: memoryview | None = None
        # The proto's raw data, where the importer left it out of the parsed message (it stays
        # in the input file's mapped bytes, :mod:`onnxopt.importer.wire`): the proto alone
        # then lacks its numbers, and ``numpy`` reads them from here.
        self.raw: memoryview | None = None

    @classmethod
    def from_array(cls, array: np.ndarray) -> LazyTensor:
        array = np.asarray(array)
        return cls(from_numpy(array.dtype), array.shape, array=array)

    @classmethod
    def from_proto(cls, proto: TensorProto, external: ExternalLocation | None = None) -> LazyTensor:
        return cls(dtype_name(proto.data_type), tuple(proto.dims), proto=proto, external=external)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        if self.dtype in ("string",):
            return 0
        try:
            return self.size * numpy_dtype(self.dtype).itemsize
        except (TypeError, ValueError):
            return 0

    @property
    def is_external(self) -> bool:
        return self._external is not None

    @property
    def external(self) -> ExternalLocation | None:
        return self._external

    @property
    def proto(self) -> TensorProto | None:
        """The TensorProto this constant came from, if it is still unchanged (without its raw
        data where ``raw`` holds it)."""
        return self._proto

    def numpy(self) -> np.ndarray:
        """Load (and cache) the value as a NumPy array."""
        if self._array is not None:
            return self._array
        try:
            if self._external is not None:
                array = self._read_external()
            elif self.raw is not None:  # as onnx's to_array reads raw data: not copied
                array = np.frombuffer(self.raw, dtype=numpy_dtype(self.dtype))
                array = array.reshape(self.shape)
            else:
                array = numpy_helper.to_array(self._proto)
            if array.shape != self.shape:
                raise ValueError(f"{array.size} elements for shape {list(self.shape)}")
        except (ValueError, TypeError, KeyError) as e:
            # The file's bytes do not fit the tensor's type and shape: ONNX Runtime refuses it
            # too, but only where it reads it; onnxopt says so only where a pass needs it.
            name = self._proto.name if self._proto is not None else "a tensor"
            raise ModelError(f"tensor '{name}': its data does not match its type and shape "
                             f"({' '.join(str(e).split())[:120]})") from None
        self._array = array
        return array

    def _read_external(self) -> np.ndarray:
        loc = self._external
        dtype = numpy_dtype(self.dtype)
        count = self.size
        with open(loc.path, "rb") as f:
            f.seek(loc.offset)
            data = f.read(count * dtype.itemsize if loc.length is None else loc.length)
        return np.frombuffer(data, dtype=dtype, count=count).reshape(self.shape).copy()

    def raw_chunks(self, chunk_size: int = 1 << 24):
        """Yield the tensor's little-endian bytes in chunks, without loading it all at once."""
        if self._external is not None and self._array is None:
            loc = self._external
            remaining = loc.length
            if remaining is None:
                remaining = self.nbytes
            with open(loc.path, "rb") as f:
                f.seek(loc.offset)
                while remaining > 0:
                    chunk = f.read(min(chunk_size, remaining))
                    if not chunk:
                        raise OSError(f"external data file {loc.path} ends early")
                    remaining -= len(chunk)
                    yield chunk
            return
        data = np.ascontiguousarray(self.numpy()).astype(self.numpy().dtype.newbyteorder("<"))
        yield data.tobytes()

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        where = "external" if self.is_external else ("array" if self._array is not None else "proto")
        return f"LazyTensor({self.dtype}[{dims}], {where})"

