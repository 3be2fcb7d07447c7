"""Can this process run onnxopt's CUDA kernels inside ONNX Runtime?

"CUDA usable" means, and means the same everywhere in onnxopt:

1. this onnxruntime build has ``CUDAExecutionProvider`` (ORT hands CUDA kernels device
   pointers and its compute stream only there);
2. the CUDA driver library loads and sees at least one device (the kernels launch through
   the driver API, ``onnxopt.runtime.cuda.driver``; PyCUDA is *not* needed);
3. nvcc is found (the kernels are compiled for the device's architecture at first use and
   cached on disk).

The onnxruntime-gpu wheel lists CUDAExecutionProvider even on machines with no driver, so
the provider list alone does not answer.
"""

from __future__ import annotations

import functools

import onnxruntime as ort


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when CUDA kernels can run here, else a short reason (the first thing missing)."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "this onnxruntime build has no CUDAExecutionProvider (install onnxruntime-gpu)"
    return device_unavailable_reason()


@functools.lru_cache(maxsize=1)
def device_unavailable_reason() -> str | None:
    """None when our kernels can be compiled and launched here (driver, device, nvcc),
    whatever ORT's build; else a short reason. The staged path of ``onnxopt run`` needs only
    this."""
    from onnxopt.runtime.cuda import compiler, driver

    try:
        driver._init()
    except driver.CudaUnavailable as error:
        return str(error)
    except (driver.CudaError, OSError) as error:
        return f"the CUDA driver cannot be initialised ({error})"
    if not driver.available():
        return "no CUDA device is visible"
    if compiler.find_nvcc() is None:
        return "nvcc was not found (the kernels compile at first use; set ONNXOPT_NVCC or CUDA_HOME)"
    return None


def available() -> bool:
    return unavailable_reason() is None
