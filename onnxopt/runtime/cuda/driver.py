"""The CUDA driver API through ctypes, only where PyCUDA has no API for what is needed.

Each use, and why it is not PyCUDA (``pycuda_backend`` does everything PyCUDA can):

- ``launch`` (``cuLaunchKernel``): PyCUDA launches only on a ``pycuda.driver.Stream`` it
  created (its C++ side extracts the handle from that class), so it cannot launch on ONNX
  Runtime's compute stream, ``torch.cuda.current_stream()`` or any other foreign ``CUstream``.
  Calling the driver directly also keeps the launch free of allocations and host
  synchronisation (CUDA-graph capture works).
- ``load_module`` / ``get_function`` / ``set_max_dynamic_smem``: the launch above needs the
  ``CUfunction`` handle, and PyCUDA's ``Module``/``Function`` do not expose their handles; so
  the module whose functions we launch is loaded here, into the current context.
- ``current_context`` / ``current_device``: ONNX Runtime makes its context current in the
  thread of its compute callback; PyCUDA's ``Context.get_current()`` knows only contexts on
  PyCUDA's own stack, not a foreign current context.
- ``device_attributes``: the device probe's fallback on a machine without PyCUDA (the
  optimizer's default target must still see the GPU; the kernels themselves need PyCUDA).

Nothing here runs at import time beyond ctypes: the library is opened on first use, and a
machine without a driver gets ``CudaUnavailable``, never an import error.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Sequence

CUDA_SUCCESS = 0
FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
# CU_DEVICE_ATTRIBUTE_* ids (cuda.h) of the attributes the probe reads; the names are those of
# pycuda.driver.device_attribute, lower-cased.
DEVICE_ATTRIBUTES = {
    "compute_capability_major": 75,
    "compute_capability_minor": 76,
    "multiprocessor_count": 16,
    "max_shared_memory_per_block_optin": 97,
    "max_shared_memory_per_multiprocessor": 81,
    "max_threads_per_multiprocessor": 39,
    "max_blocks_per_multiprocessor": 106,
    "max_registers_per_multiprocessor": 82,
}

_void_p = ctypes.c_void_p


class CudaUnavailable(RuntimeError):
    """No CUDA driver library, or no device."""


class CudaError(RuntimeError):
    """A driver call returned an error code."""

    def __init__(self, call: str, code: int, name: str):
        super().__init__(f"{call} failed: {name} ({code})")
        self.code = code


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    names = [os.environ["ONNXOPT_LIBCUDA"]] if os.environ.get("ONNXOPT_LIBCUDA") else []
    names += ["libcuda.so.1", "libcuda.so", "nvcuda.dll"]
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        _declare(lib)
        return lib
    raise CudaUnavailable("the CUDA driver library (libcuda.so.1) was not found")


def _declare(lib: ctypes.CDLL) -> None:
    i32, u32 = ctypes.c_int, ctypes.c_uint
    p = ctypes.POINTER
    sigs = {
        "cuInit": [u32],
        "cuGetErrorName": [i32, p(ctypes.c_char_p)],
        "cuDeviceGetCount": [p(i32)],
        "cuDeviceGet": [p(i32), i32],
        "cuDeviceGetAttribute": [p(i32), i32, i32],
        "cuCtxGetCurrent": [p(_void_p)],
        "cuCtxGetDevice": [p(i32)],
        "cuModuleLoadData": [p(_void_p), _void_p],
        "cuModuleGetFunction": [p(_void_p), _void_p, ctypes.c_char_p],
        "cuFuncSetAttribute": [_void_p, i32, i32],
        "cuLaunchKernel": [_void_p, u32, u32, u32, u32, u32, u32, u32, _void_p, p(_void_p),
                           p(_void_p)],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None:  # reported when called, so one missing entry point breaks nothing else
            continue
        fn.argtypes = args
        fn.restype = i32


def _check(call: str, code: int) -> None:
    if code != CUDA_SUCCESS:
        name = ctypes.c_char_p()
        _lib().cuGetErrorName(code, ctypes.byref(name))
        raise CudaError(call, code, (name.value or b"?").decode())


def _call(name: str, *args) -> None:
    fn = getattr(_lib(), name, None)
    if fn is None:
        raise CudaUnavailable(f"the CUDA driver library has no {name}")
    _check(name, fn(*args))


@functools.lru_cache(maxsize=1)
def _init() -> None:
    _call("cuInit", 0)


def device_count() -> int:
    _init()
    n = ctypes.c_int()
    _call("cuDeviceGetCount", ctypes.byref(n))
    return n.value


def available() -> bool:
    """True when a driver and at least one device are present (never raises)."""
    try:
        return device_count() > 0
    except (CudaUnavailable, CudaError, OSError):
        return False


def device_attributes(ordinal: int) -> dict[str, int]:
    """The probe's attributes of device ``ordinal`` (see DEVICE_ATTRIBUTES)."""
    _init()
    dev = ctypes.c_int()
    _call("cuDeviceGet", ctypes.byref(dev), ordinal)
    out = {}
    for name, attr in DEVICE_ATTRIBUTES.items():
        value = ctypes.c_int()
        _call("cuDeviceGetAttribute", ctypes.byref(value), attr, dev)
        out[name] = value.value
    return out


def current_context() -> int:
    """The calling thread's current context handle, 0 when none is current."""
    _init()
    ctx = _void_p()
    _call("cuCtxGetCurrent", ctypes.byref(ctx))
    return ctx.value or 0


def current_device() -> int:
    """The device ordinal of the current context (one must be current)."""
    dev = ctypes.c_int()
    _call("cuCtxGetDevice", ctypes.byref(dev))
    return dev.value


def load_module(image: bytes) -> int:
    """cuModuleLoadData on a cubin or PTX image, in the current context (PTX is compiled by
    the driver for the device, once, into its JIT cache)."""
    mod = _void_p()
    if not image.endswith(b"\0"):
        image += b"\0"  # PTX is read as a C string; a cubin ignores the extra byte
    buf = ctypes.create_string_buffer(image, len(image))
    _call("cuModuleLoadData", ctypes.byref(mod), buf)
    return mod.value


def get_function(module: int, name: str) -> int:
    fn = _void_p()
    _call("cuModuleGetFunction", ctypes.byref(fn), _void_p(module), name.encode())
    return fn.value


def set_max_dynamic_smem(function: int, nbytes: int) -> None:
    _call("cuFuncSetAttribute", _void_p(function), FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)


def launch(
    function: int,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: Sequence[ctypes._SimpleCData],
    smem: int = 0,
    stream: int = 0,
) -> None:
    """cuLaunchKernel on any stream handle. ``args`` are ctypes scalars matching the kernel's
    parameter list exactly (``launch_args.pack`` builds them from the kernel's declaration)."""
    params = (_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    _call(
        "cuLaunchKernel",
        _void_p(function),
        grid[0],
        grid[1],
        grid[2],
        block[0],
        block[1],
        block[2],
        smem,
        _void_p(stream or None),
        params,
        None,
    )
