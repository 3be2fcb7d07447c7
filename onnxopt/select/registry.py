"""The kernel registry: every implementation onnxopt can bind a fused op to."""

from __future__ import annotations

from onnxopt.select.kernel import Kernel


def default_registry() -> list[Kernel]:
    from onnxopt.select.decompose import decomposition_kernels

    kernels: list[Kernel] = []
    for loader in _LOADERS:
        kernels.extend(loader())
    kernels.extend(decomposition_kernels())
    return kernels


_LOADERS: list = []


def register_loader(loader) -> None:
    """Backends (ORT native ops, PyCUDA kernels) add their kernel lists here."""
    if loader not in _LOADERS:
        _LOADERS.append(loader)
