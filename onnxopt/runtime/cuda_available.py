"""Can this process run onnxopt's CUDA kernels? (ORT's CUDA provider, a device, PyCUDA.)

The onnxruntime-gpu wheel lists CUDAExecutionProvider even on machines with no
driver, so the provider list alone does not answer; a CUDA device and PyCUDA
(which compiles and launches the project's kernels) must both be present.
"""

from __future__ import annotations

import functools

import onnxruntime as ort


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when CUDA kernels can run here, else a short reason."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "this onnxruntime build has no CUDAExecutionProvider"
    try:
        from pycuda import driver
    except ImportError:
        return "pycuda is not installed (pip install 'onnxopt[cuda]')"
    try:
        driver.init()
        if driver.Device.count() == 0:
            return "no CUDA device is visible"
    except Exception as error:  # noqa: BLE001 - pycuda raises its own error kinds
        return f"CUDA is not usable ({str(error).strip() or type(error).__name__})"
    return None


def available() -> bool:
    return unavailable_reason() is None
