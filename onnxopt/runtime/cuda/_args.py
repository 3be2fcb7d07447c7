"""Argument checks shared by the launch wrappers."""

from __future__ import annotations

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
