"""Rounding to the kernels' dtypes in NumPy, which has no bfloat16."""

from __future__ import annotations

import numpy as np


def bfloat16_bits(a: np.ndarray) -> np.ndarray:
    """float array -> uint16 bfloat16 bit patterns, rounding to nearest even (NaN kept NaN)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), rounded).astype(np.uint16)


def from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(a: np.ndarray, dtype: str) -> np.ndarray:
    """Round to ``dtype`` ("float32", "float16" or "bfloat16") and return float64 values."""
    if dtype == "float32":
        return np.asarray(a, dtype=np.float32).astype(np.float64)
    if dtype == "float16":
        return np.asarray(a, dtype=np.float16).astype(np.float64)
    if dtype == "bfloat16":
        return from_bfloat16_bits(bfloat16_bits(a)).astype(np.float64)
    raise ValueError(f"unknown dtype {dtype!r}")
