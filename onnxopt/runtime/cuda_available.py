"""Can this process run onnxopt's CUDA kernels inside ONNX Runtime?

"CUDA usable" means, and means the same everywhere in onnxopt:

1. this onnxruntime build has ``CUDAExecutionProvider`` (ORT hands CUDA kernels device
   pointers and its compute stream only there);
2. a CUDA device answers the device probe (``onnxopt.runtime.cuda.probe``, the one probe the
   optimizer's target uses too);
3. PyCUDA is installed and initialises (the ``[cuda]`` extra: contexts, device attributes and
   compiling for an architecture the shipped images do not cover);
4. the device can load a kernel image: one is shipped for its compute capability (no toolkit
   needed), or nvcc is there to compile one.

The onnxruntime-gpu wheel lists CUDAExecutionProvider even on machines with no driver, so
the provider list alone does not answer.
"""

from __future__ import annotations

import functools

from .ort_module import ort


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when CUDA kernels can run here, else a short reason (the first thing missing)."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "this onnxruntime build has no CUDAExecutionProvider (install onnxruntime-gpu)"
    return device_unavailable_reason()


@functools.lru_cache(maxsize=1)
def device_unavailable_reason() -> str | None:
    """None when our kernels can be loaded and launched here (device, PyCUDA, an image or
    nvcc), whatever ORT's build; else a short reason. The staged path of ``onnxopt run``
    needs only this."""
    from onnxopt.runtime.cuda import compiler, images, metadata, probe, pycuda_backend

    limits = probe.device()
    if limits is None:
        return probe.reason()
    missing = pycuda_backend.available()
    if missing is not None:
        return missing
    uncovered = [f for f in metadata.FAMILIES if images.find(f, limits.compute_capability) is None]
    if uncovered and compiler.find_nvcc() is None:
        cc = limits.compute_capability
        return (f"no shipped kernel image covers compute capability {cc[0]}.{cc[1]} "
                f"({', '.join(uncovered)}) and nvcc was not found to compile one "
                "(run `onnxopt kernels --build`, or set ONNXOPT_NVCC or CUDA_HOME)")
    return None


def available() -> bool:
    return unavailable_reason() is None
