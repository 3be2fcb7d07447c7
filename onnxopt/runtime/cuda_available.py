"""Can this process run onnxopt's CUDA kernels inside ONNX Runtime?

"CUDA usable" means, and means the same everywhere in onnxopt:

1. this onnxruntime build has ``CUDAExecutionProvider`` (ORT hands CUDA kernels device
   pointers and its compute stream only there);
2. a CUDA device answers the device probe (``onnxopt.runtime.cuda.probe``, the one probe the
   optimizer's target uses too);
3. for a model with onnxopt's kernels: the device can load a kernel image of every family, one
   shipped for its compute capability (no toolkit needed), or one PyCUDA can compile (PyCUDA
   and nvcc both there).

The onnxruntime-gpu wheel lists CUDAExecutionProvider even on machines with no driver, so
the provider list alone does not answer. Serving needs no PyCUDA: ``libonnxopt_ops`` opens
the driver itself.
"""

from __future__ import annotations

import functools
import os

from .ort_module import ort


@functools.lru_cache(maxsize=2)
def unavailable_reason(kernels: bool = True) -> str | None:
    """None when a CUDA session can run here (``kernels``: with onnxopt's kernels), else a
    short reason (the first thing missing)."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "this onnxruntime build has no CUDAExecutionProvider (install onnxruntime-gpu)"
    from onnxopt.runtime.cuda import probe

    if kernels:
        return device_unavailable_reason()
    return probe.reason()


@functools.lru_cache(maxsize=1)
def device_unavailable_reason() -> str | None:
    """None when our kernels can be loaded and launched here (a device, and an image for it
    or PyCUDA and nvcc to compile one), whatever ORT's build; else a short reason. The staged
    path needs only this."""
    from onnxopt.runtime.cuda import compiler, images, metadata, probe, pycuda_backend

    limits = probe.device()
    if limits is None:
        return probe.reason()
    uncovered = [f for f in metadata.FAMILIES if images.find(f, limits.compute_capability) is None]
    if not uncovered:
        return None
    cc = limits.compute_capability
    missing = pycuda_backend.available()
    if missing is None and compiler.find_nvcc() is not None:
        return None
    return (f"no kernel image covers compute capability {cc[0]}.{cc[1]} "
            f"({', '.join(uncovered)}) and PyCUDA with nvcc is not there to compile one "
            "(run `onnxopt kernels --build`)")


def available() -> bool:
    return unavailable_reason() is None


def point_library_at_images() -> None:
    """Add the folders of this package's kernel images to $ONNXOPT_KERNEL_IMAGES, where
    libonnxopt_ops looks first: the shipped images, and images PyCUDA compiles for a device no
    shipped image covers."""
    from onnxopt.runtime.cuda import images, probe

    folders = [str(images.image_dir())]
    limits = probe.device()
    if limits is not None:
        compiled = images.compile_uncovered(limits.compute_capability)
        if compiled is not None:
            folders.insert(0, str(compiled))
    present = [f for f in os.environ.get("ONNXOPT_KERNEL_IMAGES", "").split(":") if f]
    os.environ["ONNXOPT_KERNEL_IMAGES"] = ":".join(
        present + [f for f in folders if f not in present])
