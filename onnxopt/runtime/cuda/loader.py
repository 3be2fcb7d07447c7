"""Compile (cached), load and hold the kernels' entry points, per CUDA context.

``get(family, entry)`` returns a ``LoadedKernel`` ready for ``driver.launch``. The first call for
an entry in a context compiles its specialisation (or finds the cubin in the disk cache), loads
it and sets its dynamic shared-memory limit; later calls are a dict lookup. Loading is not
capturable into a CUDA graph, so call ``preload`` before capturing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from . import compiler, driver, metadata


class KernelUnsupported(RuntimeError):
    """The device cannot run this kernel variant (compute capability, shared memory)."""


@dataclass(frozen=True)
class LoadedKernel:
    family: str
    entry: str
    variant: dict[str, Any]
    function: int
    smem: int
    arch: str


_loaded: dict[tuple[int, str, str], LoadedKernel] = {}
_modules: list[int] = []  # keep every module loaded for the life of the process
_lock = threading.Lock()


def get(family: str, entry: str) -> LoadedKernel:
    ctx = driver.ensure_context()
    key = (ctx, family, entry)
    kernel = _loaded.get(key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _loaded.get(key)
        if kernel is None:
            kernel = _load(family, entry)
            _loaded[key] = kernel
    return kernel


def _load(family: str, entry: str) -> LoadedKernel:
    v = metadata.variant(family, entry)
    device = driver.current_device()
    cc = driver.compute_capability(device)
    need = metadata.min_compute_capability(family, v)
    if cc < need:
        raise KernelUnsupported(
            f"{entry} needs compute capability {need[0]}.{need[1]}, device {device} has "
            f"{cc[0]}.{cc[1]}"
        )
    smem = metadata.smem_bytes(family, v)
    if smem > metadata.DEFAULT_SMEM_LIMIT:
        limit = driver.max_shared_memory_optin(device)
        if smem > limit:
            raise KernelUnsupported(
                f"{entry} needs {smem} bytes of shared memory per block, device {device} "
                f"allows {limit}"
            )
    arch = compiler.arch_for(cc)
    built = compiler.compile_cubin(
        metadata.source_path(family), arch, (compiler.spec_define(entry),)
    )
    module = driver.load_module(built.cubin.read_bytes())
    _modules.append(module)
    function = driver.get_function(module, entry)
    if smem > metadata.DEFAULT_SMEM_LIMIT:
        driver.set_max_dynamic_smem(function, smem)
    return LoadedKernel(family, entry, v, function, smem, arch)


def preload(
    families: tuple[str, ...] = metadata.FAMILIES, dtypes: tuple[str, ...] | None = None
) -> int:
    """Compile and load every variant of ``families`` (optionally only ``dtypes``) that this
    device supports; returns how many were loaded. Call before CUDA-graph capture."""
    cc = driver.compute_capability()
    count = 0
    for family in families:
        for v in metadata.variants(family):
            if dtypes is not None and v["dtype"] not in dtypes:
                continue
            if cc < metadata.min_compute_capability(family, v):
                continue
            get(family, v["entry"])
            count += 1
    return count
