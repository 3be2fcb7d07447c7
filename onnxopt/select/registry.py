"""The kernel registry: every implementation onnxopt can bind a fused op to.

Backends add their kernel lists through :func:`register_loader`: the ORT
native-op families here (one file each), the PyCUDA kernels from
``onnxopt.runtime`` when that backend is importable. The decompositions come
last and are always there, so every fused op has at least one legal kernel.
"""

from __future__ import annotations

import importlib

from onnxopt.select.decompose import decomposition_kernels
from onnxopt.select.kernel import Kernel

# One kernel family per module; importing a module registers its loader.
BUILTIN_BACKENDS = ("onnxopt.select.ort_attention", "onnxopt.select.ort_norms",
                    "onnxopt.select.ort_activations", "onnxopt.select.ort_rotary",
                    "onnxopt.select.causal_blocks", "onnxopt.select.pycuda_kernels")

_LOADERS: list = []


def default_registry() -> list[Kernel]:

    for module in BUILTIN_BACKENDS:
        importlib.import_module(module)
    kernels: list[Kernel] = []
    for loader in _LOADERS:
        kernels.extend(loader())
    kernels.extend(decomposition_kernels())
    names = [k.name for k in kernels]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"kernel names registered twice: {', '.join(duplicates)}")
    return kernels


def register_loader(loader) -> None:
    """Backends (ORT native ops, PyCUDA kernels) add their kernel lists here.

    A loader is a function returning a list of :class:`Kernel`; it is called for
    every registry built, so it may probe (e.g. whether its runtime is importable).
    """
    if loader not in _LOADERS:
        _LOADERS.append(loader)
