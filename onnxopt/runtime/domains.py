"""Register kernels on an `onnxruntime.SessionOptions` through the shim.

ORT's only door is `register_custom_ops_library(path)`, which calls the shim's
`RegisterCustomOps(options, api_base)` synchronously on the calling thread. The
shim forwards to `_on_register` below, which adds the domains this thread asked
for (held in a thread-local, so that threads creating sessions at once each
register their own).

ORT refuses the same domain twice on one SessionOptions, so all the ops of a
domain go into one `OrtCustomOpDomain`. Domain objects are cached by their exact
set of kernels and never freed: ORT does not take ownership of them, and
sessions made earlier keep pointing at them.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterable

from . import native, ortapi
from .customop import CustomOp
from .ort_module import ort
from .registry import KernelSpec

_REGISTER_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)

_lock = threading.Lock()
_pending = threading.local()
_domains: dict[
    tuple[str, tuple[int, ...]], int
] = {}  # (domain, kernel serials) -> OrtCustomOpDomain*
_ops: dict[int, CustomOp] = {}  # spec.serial -> its struct, one per declaration
_installed = False


def _domain_object(api: ortapi.OrtApi, domain: str, specs: list[KernelSpec]) -> int:
    key = (domain, tuple(sorted(spec.serial for spec in specs)))
    with _lock:
        if key in _domains:
            return _domains[key]
        handle = ctypes.c_void_p()
        api.check(
            api.CreateCustomOpDomain(domain.encode("utf-8"), ctypes.byref(handle)),
            "CreateCustomOpDomain",
        )
        for spec in specs:
            op = _ops.get(spec.serial)
            if op is None:
                op = _ops[spec.serial] = CustomOp(spec)
            api.check(api.CustomOpDomain_Add(handle, op.address), "CustomOpDomain_Add")
        _domains[key] = handle.value
        return handle.value


@_REGISTER_FN
def _on_register(options, api_base):
    api = None
    try:
        api = ortapi.bind(api_base)
        for domain, specs in (getattr(_pending, "value", None) or {}).items():
            handle = _domain_object(api, domain, specs)
            api.check(api.AddCustomOpDomain(options, handle), "AddCustomOpDomain")
        return None
    except BaseException as error:  # noqa: BLE001 - becomes ORT's error status
        if api is None:
            return None
        return api.status(ortapi.ORT_FAIL, f"onnxopt: registering custom ops failed: {error}")


def _install_callback() -> native.Shim:
    global _installed
    shim = native.load()
    with _lock:
        if not _installed:
            shim.lib.onnxopt_set_register_callback(ctypes.cast(_on_register, ctypes.c_void_p))
            _installed = True
    return shim


def register(options: ort.SessionOptions, kernels: Iterable[KernelSpec]) -> None:
    """Add `kernels` to `options`, one custom-op domain per distinct domain name."""
    by_domain: dict[str, list[KernelSpec]] = {}
    for spec in kernels:
        by_domain.setdefault(spec.domain, []).append(spec)
    if not by_domain:
        return
    shim = _install_callback()
    _pending.value = by_domain
    try:
        options.register_custom_ops_library(shim.path)
    finally:
        _pending.value = None
