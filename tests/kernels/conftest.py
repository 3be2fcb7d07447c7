"""GPU tests here are marked ``gpu`` and skipped, with the reason, where there is no CUDA driver,
no device or no nvcc. They need neither PyCUDA nor PyTorch: memory and launches go through the
driver API (onnxopt.runtime.cuda.driver); the interop tests that use those libraries skip on
their own when the library is missing."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from onnxopt.runtime.cuda import compiler, driver
from onnxopt.runtime.cuda.reference import bfloat16_bits, from_bfloat16_bits

HERE = Path(__file__).parent
GUARD = 256  # poisoned bytes after every output buffer, checked after each launch


@functools.lru_cache(maxsize=1)
def gpu_skip_reason() -> str | None:
    if compiler.find_nvcc() is None:
        return "nvcc not found"
    if not driver.available():
        return "no CUDA driver or no CUDA device"
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and HERE in Path(str(item.path)).parents:
            reason = gpu_skip_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"gpu test: {reason}"))


class Device:
    """Device buffers for the tests: uploads, poisoned outputs with a guard tail, downloads."""

    HOST_DTYPE: ClassVar[dict[str, type]] = {
        "float32": np.float32,
        "float16": np.float16,
        "bfloat16": np.uint16,
    }

    @staticmethod
    def to_host(x: np.ndarray, dtype: str) -> np.ndarray:
        """float array -> the bytes a ``dtype`` tensor holds (bfloat16 as uint16 bit patterns)."""
        if dtype == "bfloat16":
            return bfloat16_bits(x)
        return np.ascontiguousarray(x, dtype=Device.HOST_DTYPE[dtype])

    @staticmethod
    def from_host(x: np.ndarray, dtype: str) -> np.ndarray:
        """The inverse of ``to_host``, as float64."""
        if dtype == "bfloat16":
            return from_bfloat16_bits(x).astype(np.float64)
        return x.astype(np.float64)

    def __init__(self) -> None:
        driver.ensure_context()
        self._ptrs: list[int] = []

    def upload(self, host: np.ndarray, *, offset: int = 0) -> int:
        """Copy ``host`` to a new buffer at byte ``offset`` (to make misaligned pointers)."""
        host = np.ascontiguousarray(host)
        base = driver.mem_alloc(host.nbytes + offset + GUARD)
        self._ptrs.append(base)
        driver.memcpy_htod(base + offset, host.ctypes.data, host.nbytes)
        return base + offset

    def poisoned(self, nbytes: int, *, offset: int = 0) -> int:
        """A buffer of ``nbytes`` + guard, every byte 0xFF (NaN in fp32, fp16 and bf16)."""
        base = driver.mem_alloc(nbytes + offset + GUARD)
        self._ptrs.append(base)
        driver.memset_d8(base, 0xFF, nbytes + offset + GUARD)
        return base + offset

    def download(self, ptr: int, shape: tuple[int, ...], np_dtype) -> np.ndarray:
        out = np.empty(shape, dtype=np_dtype)
        driver.memcpy_dtoh(out.ctypes.data, ptr, out.nbytes)
        return out

    def guard_intact(self, ptr: int, nbytes: int) -> bool:
        tail = self.download(ptr + nbytes, (GUARD,), np.uint8)
        return bool((tail == 0xFF).all())

    def free(self) -> None:
        for p in self._ptrs:
            driver.mem_free(p)
        self._ptrs.clear()


@pytest.fixture
def dev():
    d = Device()
    yield d
    driver.synchronize()
    d.free()
