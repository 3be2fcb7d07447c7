"""Argument checks shared by the launch wrappers."""

from __future__ import annotations

import ctypes
import functools

_DTYPE_ALIASES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "f32": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "f16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}


@functools.lru_cache(maxsize=64)
def canonical_dtype(dtype: object) -> str:
    """ "float32" / "float16" / "bfloat16" from a name, a NumPy dtype or a torch dtype."""
    name = str(dtype).lower().removeprefix("torch.")
    try:
        return _DTYPE_ALIASES[name]
    except KeyError:
        raise ValueError(f"unsupported dtype {dtype!r}: use float32, float16 or bfloat16") from None


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def check_positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if int(value) <= 0:
            raise ValueError(f"{name} must be positive, got {value}")


def aligned(alignment: int, *ptrs: int) -> bool:
    """True when every non-null pointer is a multiple of ``alignment``."""
    return all(p % alignment == 0 for p in ptrs if p)


def ptr(p: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(int(p or 0))


def i32(v: int) -> ctypes.c_int32:
    v = int(v)
    if not -(2**31) <= v < 2**31:
        raise OverflowError(f"{v} does not fit in int32")
    return ctypes.c_int32(v)


def i64(v: int) -> ctypes.c_int64:
    return ctypes.c_int64(int(v))


def f32(v: float) -> ctypes.c_float:
    return ctypes.c_float(float(v))
