"""Load kernel families onto the current device and hold their entry points, per context.

``get(family, entry)`` returns a ``LoadedKernel`` ready for ``driver.launch``. The first call
for a family in a context loads its module: the shipped image for the device's capability
(``images.find``; no toolkit needed), or, only when no shipped image covers the device, the
family compiled for ``sm_XY`` through PyCUDA's compiler and cache. The module is loaded with
the driver API because the launch on ONNX Runtime's stream needs the function handle (see
``driver``). When the calling thread has no current context (the staged path, tests), the
device's primary context, the one ONNX Runtime's CUDA provider uses, is attached through
PyCUDA. Loading is not capturable into a CUDA graph, so call ``preload`` before capturing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from . import compiler, devices, driver, images, metadata, probe, pycuda_backend


class KernelUnsupported(RuntimeError):
    """The device cannot run this kernel variant (compute capability, shared memory)."""


@dataclass(frozen=True)
class LoadedKernel:
    family: str
    entry: str
    variant: dict[str, Any]
    function: int
    smem: int
    target: str  # the image it came from: "sm_86", "compute_90", or "sm_75 (compiled)"


_modules: dict[tuple[int, str], tuple[int, str]] = {}  # (context, family) -> (module, target)
_loaded: dict[tuple[int, str, str], LoadedKernel] = {}
_lock = threading.Lock()


def ensure_context() -> int:
    """The current context; attaches the default device's primary context through PyCUDA
    when none is current."""
    ctx = driver.current_context()
    if ctx:
        return ctx
    pycuda_backend.attach_primary(probe.default_ordinal())
    return driver.current_context()


def device_limits() -> devices.DeviceLimits:
    """The limits of the current context's device (what the tile choice reads)."""
    ensure_context()
    return probe.limits(driver.current_device())


def get(family: str, entry: str) -> LoadedKernel:
    ctx = ensure_context()
    key = (ctx, family, entry)
    kernel = _loaded.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _loaded.get(key)
        if kernel is None:
            kernel = _load(ctx, family, entry)
            _loaded[key] = kernel
    return kernel


def image_for(family: str, cc: tuple[int, int]) -> tuple[bytes, str]:
    """(module image, where it came from) for a device of capability ``cc``."""
    found = images.find(family, cc)
    if found is not None:
        return found.path.read_bytes(), found.target
    arch = compiler.arch_for(cc)
    return pycuda_backend.compile_family(metadata.source_path(family), arch), f"{arch} (compiled)"


def _load(ctx: int, family: str, entry: str) -> LoadedKernel:
    v = metadata.variant(family, entry)
    limits = probe.limits(driver.current_device())
    cc = limits.compute_capability
    need = metadata.min_compute_capability(family, v)
    if cc < need:
        raise KernelUnsupported(
            f"{entry} needs compute capability {need[0]}.{need[1]}, the device has "
            f"{cc[0]}.{cc[1]}")
    smem = metadata.smem_bytes(family, v)
    if smem > limits.smem_optin:
        raise KernelUnsupported(
            f"{entry} needs {smem} bytes of shared memory per block, the device allows "
            f"{limits.smem_optin}")
    module_key = (ctx, family)
    if module_key not in _modules:
        image, target = image_for(family, cc)
        _modules[module_key] = (driver.load_module(image), target)  # kept for the process
    module, target = _modules[module_key]
    function = driver.get_function(module, entry)
    if smem > devices.DEFAULT_SMEM_LIMIT:
        driver.set_max_dynamic_smem(function, smem)
    return LoadedKernel(family, entry, v, function, smem, target)


def preload(families: tuple[str, ...] = metadata.FAMILIES,
            dtypes: tuple[str, ...] | None = None) -> int:
    """Load every variant of ``families`` (optionally only ``dtypes``) that this device can
    run; returns how many were loaded. Call before CUDA-graph capture."""
    limits = device_limits()
    count = 0
    for family in families:
        for v in metadata.variants(family):
            if dtypes is not None and v["dtype"] not in dtypes:
                continue
            if limits.compute_capability < metadata.min_compute_capability(family, v):
                continue
            if metadata.smem_bytes(family, v) > limits.smem_optin:
                continue
            get(family, v["entry"])
            count += 1
    return count
