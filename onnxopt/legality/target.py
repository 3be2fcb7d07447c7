"""The target context: what the machine and the user allow.

Legality checks and kernel selection read it; nothing else does. The device
is probed, not trusted: onnxruntime-gpu lists ``CUDAExecutionProvider`` even
on machines without a GPU, so ``cuda`` is the default only when a CUDA
device really answers.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """Device kind, capability and policies a rewrite or kernel must respect."""

    device: str = "cpu"  # "cpu" | "cuda"
    compute_capability: tuple[int, int] = (0, 0)
    determinism: str = "relaxed"  # "strict" | "relaxed"
    shared_memory_bytes: int = 0
    ort_version: tuple[int, int] = (1, 31)
    opset: int = 21

    @property
    def provider(self) -> str:
        return "CUDAExecutionProvider" if self.device == "cuda" else "CPUExecutionProvider"


@functools.lru_cache(maxsize=1)
def cuda_device() -> tuple[int, int] | None:
    """Compute capability of CUDA device 0, or None when no device answers."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if lib.cuInit(0) != 0:
            return None
        count = ctypes.c_int()
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            return None
        major, minor = ctypes.c_int(), ctypes.c_int()
        if lib.cuDeviceGetAttribute(ctypes.byref(major), 75, 0) != 0:  # COMPUTE_CAPABILITY_MAJOR
            return None
        lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, 0)
        return (major.value, minor.value)
    return None


def installed_ort_version() -> tuple[int, int]:
    try:
        import onnxruntime as ort

        major, minor = ort.__version__.split(".")[:2]
        return (int(major), int(minor))
    except Exception:  # noqa: BLE001 - no ORT: assume the version we were built against
        return (1, 31)


def make_target(device: str | None = None, *, determinism: str = "relaxed",
                ort_version: str | None = None, opset: int | None = None) -> Target:
    """Build the target from user options, probing the machine for what was left open."""
    cc = cuda_device()
    if device is None:
        device = "cuda" if cc is not None else "cpu"
    if ort_version:
        major, minor = ort_version.split(".")[:2]
        ort = (int(major), int(minor))
    else:
        ort = installed_ort_version()
    return Target(
        device=device,
        compute_capability=cc or ((8, 0) if device == "cuda" else (0, 0)),
        determinism=determinism,
        shared_memory_bytes=(227 * 1024 if (cc or (0, 0)) >= (9, 0) else 163 * 1024)
        if device == "cuda" else 0,
        ort_version=ort,
        opset=opset or 21,
    )
