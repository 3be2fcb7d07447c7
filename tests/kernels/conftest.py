"""GPU tests here are marked ``gpu`` and skipped, with the reason, where onnxopt's CUDA kernels
cannot run (no device, no PyCUDA, no kernel image for the device and no nvcc to build one).
Device memory comes from PyCUDA (``pycuda_backend``); launches go through the launch wrappers
(``cuLaunchKernel``); the interop tests that use PyTorch skip on their own without it."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from onnxopt.reference import bfloat16_bits, from_bfloat16_bits
from onnxopt.runtime.cuda import loader
from onnxopt.runtime.cuda import pycuda_backend as pyc

HERE = Path(__file__).parent
GUARD = 256  # poisoned bytes after every output buffer, checked after each launch


@functools.lru_cache(maxsize=1)
def gpu_skip_reason() -> str | None:
    from onnxopt.runtime.cuda_available import device_unavailable_reason

    return device_unavailable_reason()


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
        loader.ensure_context()
        self._allocations: list = []

    def _alloc(self, nbytes: int) -> int:
        allocation = pyc.mem_alloc(nbytes)
        self._allocations.append(allocation)
        return int(allocation)

    def upload(self, host: np.ndarray, *, offset: int = 0) -> int:
        """Copy ``host`` to a new buffer at byte ``offset`` (to make misaligned pointers)."""
        host = np.ascontiguousarray(host)
        base = self._alloc(host.nbytes + offset + GUARD)
        if host.nbytes:
            pyc.memcpy_htod(base + offset, host)
        return base + offset

    def poisoned(self, nbytes: int, *, offset: int = 0) -> int:
        """A buffer of ``nbytes`` + guard, every byte 0xFF (NaN in fp32, fp16 and bf16)."""
        base = self._alloc(nbytes + offset + GUARD)
        pyc.memset_d8(base, 0xFF, nbytes + offset + GUARD)
        return base + offset

    def download(self, ptr: int, shape: tuple[int, ...], np_dtype) -> np.ndarray:
        out = np.empty(shape, dtype=np_dtype)
        if out.nbytes:
            pyc.memcpy_dtoh(out, ptr)
        return out

    def guard_intact(self, ptr: int, nbytes: int) -> bool:
        tail = self.download(ptr + nbytes, (GUARD,), np.uint8)
        return bool((tail == 0xFF).all())

    def free(self) -> None:
        for allocation in self._allocations:
            allocation.free()
        self._allocations.clear()


@pytest.fixture(scope="session")
def built_images(tmp_path_factory):
    """(folder, images): every family for every shipped target, built once per session."""
    from onnxopt.runtime.cuda import compiler, metadata

    if compiler.find_nvcc() is None:
        pytest.skip("nvcc not found")
    folder = tmp_path_factory.mktemp("images")
    return folder, compiler.build_images(metadata.kernels_dir(), folder)


@pytest.fixture
def dev():
    d = Device()
    yield d
    pyc.synchronize()
    d.free()
