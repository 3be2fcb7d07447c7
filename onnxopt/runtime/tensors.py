"""Element types, and tensors seen as NumPy views of ORT's memory (or as device pointers).

A CPU kernel gets its inputs as NumPy arrays that *are* ORT's buffers (no copy,
read-only so that a kernel cannot corrupt an initializer), and may write its
results straight into ORT's output buffers. A CUDA kernel gets `DeviceTensor`s:
pointer, shape and dtype, plus `__cuda_array_interface__` so that CuPy, Numba or
PyCUDA can wrap them without copying.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np

try:  # NumPy's bfloat16, from onnx's own dependency
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # pragma: no cover - then bfloat16 tensors have no NumPy view
    _bfloat16 = None

# ONNXTensorElementDataType values (same numbers as onnx.TensorProto.DataType).
UNDEFINED = 0
_ELEMENT_TYPES: dict[str, int] = {
    "float32": 1,
    "uint8": 2,
    "int8": 3,
    "int32": 6,
    "int64": 7,
    "bool": 9,
    "float16": 10,
    "float64": 11,
    "bfloat16": 16,
}
_NUMPY = {
    code: np.dtype(_bfloat16 if name == "bfloat16" else name)
    for name, code in _ELEMENT_TYPES.items()
    if name != "bfloat16" or _bfloat16 is not None
}
_ALIASES = {"float": "float32", "double": "float64", "half": "float16"}


def element_type(dtype: str) -> int:
    """ORT's element-type code for a dtype name ("float32", ...); "any" is UNDEFINED."""
    if dtype == "any":
        return UNDEFINED
    name = _ALIASES.get(dtype, dtype)
    if name not in _ELEMENT_TYPES:
        supported = ", ".join([*_ELEMENT_TYPES, "any"])
        raise ValueError(f"unsupported tensor dtype {dtype!r}; supported: {supported}")
    return _ELEMENT_TYPES[name]


def numpy_dtype(code: int) -> np.dtype:
    """The NumPy dtype for an ORT element-type code."""
    try:
        return _NUMPY[code]
    except KeyError:
        raise TypeError(f"ORT element type {code} has no NumPy view in onnxopt's bridge") from None


def host_view(
    address: int | None, shape: tuple[int, ...], dtype: np.dtype, writeable: bool
) -> np.ndarray:
    """A NumPy array over `address` that owns nothing: ORT keeps the memory."""
    count = math.prod(shape)
    if count == 0 or not address:
        return np.empty(shape, dtype)
    buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(address)
    array = np.frombuffer(buffer, dtype).reshape(shape)
    if not writeable:
        array.flags.writeable = False
    return array


@dataclass(frozen=True)
class DeviceTensor:
    """A tensor in device memory: what a CUDA kernel receives for each input and output."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    readonly: bool = False

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr or 0, self.readonly),
            "version": 3,
            "strides": None,
        }
