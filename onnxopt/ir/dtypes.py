"""Element types by name.

The IR speaks of dtypes by readable name (``"float32"``), not by ONNX's integer
codes, so passes and printed IR read naturally. This module is the single place
that converts between the two.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

_BY_CODE: dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.UINT8: "uint8",
    TensorProto.INT8: "int8",
    TensorProto.UINT16: "uint16",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.STRING: "string",
    TensorProto.BOOL: "bool",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "float64",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.COMPLEX64: "complex64",
    TensorProto.COMPLEX128: "complex128",
    TensorProto.BFLOAT16: "bfloat16",
}
for _name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",
              "FLOAT4E2M1"):
    if hasattr(TensorProto, _name):
        _BY_CODE[getattr(TensorProto, _name)] = _name.lower()

_BY_NAME = {name: code for code, name in _BY_CODE.items()}

FLOAT_TYPES = frozenset({"float32", "float16", "bfloat16", "float64"})


def dtype_name(code: int) -> str | None:
    """ONNX element-type code → IR dtype name (``None`` for UNDEFINED)."""
    if code == TensorProto.UNDEFINED:
        return None
    return _BY_CODE.get(code, f"type{code}")


def dtype_code(name: str | None) -> int:
    """IR dtype name → ONNX element-type code."""
    if name is None:
        return TensorProto.UNDEFINED
    if name in _BY_NAME:
        return _BY_NAME[name]
    if name.startswith("type"):
        return int(name[4:])
    raise ValueError(f"unknown dtype {name!r}")


def numpy_dtype(name: str) -> np.dtype:
    """IR dtype name → NumPy dtype (bfloat16 and float8 types map through ml_dtypes if present)."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(dtype_code(name)))


def from_numpy(dtype: np.dtype) -> str:
    """NumPy dtype → IR dtype name."""
    return dtype_name(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
