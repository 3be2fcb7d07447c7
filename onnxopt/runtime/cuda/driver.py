"""The few CUDA driver-API calls the kernels need, through ctypes on libcuda.

Why not PyCUDA for launching: PyCUDA's ``Function.__call__`` accepts only a ``pycuda.driver.Stream``
(its C++ side extracts the handle from that class), so it cannot launch on a stream it did not
create, such as ONNX Runtime's compute stream or ``torch.cuda.current_stream()``. cuLaunchKernel
takes any CUstream handle, and calling it directly also keeps the launch path free of
allocations and host synchronisation (CUDA-graph capture works).

Contexts: every call runs in the calling thread's *current* context. If none is current,
``ensure_context`` makes the device's primary context current, which is the one PyTorch, ONNX
Runtime's CUDA EP, CuPy and ``pycuda.autoprimaryctx`` use, so device pointers from any of them
are valid here.

Nothing here imports at module load time beyond ctypes: the library is opened on first use,
and a machine without a driver gets a ``CudaUnavailable`` error, never an import error.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Sequence

CUDA_SUCCESS = 0
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

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
    u64, i32, u32, sz = ctypes.c_uint64, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t
    p = ctypes.POINTER
    sigs = {
        "cuInit": [u32],
        "cuGetErrorName": [i32, p(ctypes.c_char_p)],
        "cuDeviceGetCount": [p(i32)],
        "cuDeviceGet": [p(i32), i32],
        "cuDeviceGetAttribute": [p(i32), i32, i32],
        "cuDevicePrimaryCtxRetain": [p(_void_p), i32],
        "cuCtxGetCurrent": [p(_void_p)],
        "cuCtxSetCurrent": [_void_p],
        "cuCtxGetDevice": [p(i32)],
        "cuCtxSynchronize": [],
        "cuModuleLoadData": [p(_void_p), _void_p],
        "cuModuleUnload": [_void_p],
        "cuModuleGetFunction": [p(_void_p), _void_p, ctypes.c_char_p],
        "cuFuncSetAttribute": [_void_p, i32, i32],
        "cuLaunchKernel": [
            _void_p,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            _void_p,
            p(_void_p),
            p(_void_p),
        ],
        "cuStreamCreate": [p(_void_p), u32],
        "cuStreamDestroy_v2": [_void_p],
        "cuStreamSynchronize": [_void_p],
        "cuMemAlloc_v2": [p(u64), sz],
        "cuMemFree_v2": [u64],
        "cuMemcpyHtoD_v2": [u64, _void_p, sz],
        "cuMemcpyDtoH_v2": [_void_p, u64, sz],
        "cuMemsetD8_v2": [u64, ctypes.c_ubyte, sz],
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


def available() -> bool:
    """True when a driver and at least one device are present (never raises)."""
    try:
        _init()
        n = ctypes.c_int()
        _call("cuDeviceGetCount", ctypes.byref(n))
        return n.value > 0
    except (CudaUnavailable, CudaError, OSError):
        return False


def ensure_context(ordinal: int | None = None) -> int:
    """The current context's handle; retains and sets the primary context if none is current.

    ``ordinal`` (default $ONNXOPT_CUDA_DEVICE or 0) is used only when no context is current.
    """
    _init()
    ctx = _void_p()
    _call("cuCtxGetCurrent", ctypes.byref(ctx))
    if ctx.value:
        return ctx.value
    if ordinal is None:
        ordinal = int(os.environ.get("ONNXOPT_CUDA_DEVICE", "0"))
    dev = ctypes.c_int()
    _call("cuDeviceGet", ctypes.byref(dev), ordinal)
    _call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    _call("cuCtxSetCurrent", ctx)
    return ctx.value


def current_device() -> int:
    ensure_context()
    dev = ctypes.c_int()
    _call("cuCtxGetDevice", ctypes.byref(dev))
    return dev.value


@functools.cache
def _attribute(device: int, attr: int) -> int:
    dev = ctypes.c_int()
    _call("cuDeviceGet", ctypes.byref(dev), device)
    value = ctypes.c_int()
    _call("cuDeviceGetAttribute", ctypes.byref(value), attr, dev)
    return value.value


def compute_capability(device: int | None = None) -> tuple[int, int]:
    device = current_device() if device is None else device
    return (
        _attribute(device, ATTR_COMPUTE_CAPABILITY_MAJOR),
        _attribute(device, ATTR_COMPUTE_CAPABILITY_MINOR),
    )


def multiprocessor_count(device: int | None = None) -> int:
    device = current_device() if device is None else device
    return _attribute(device, ATTR_MULTIPROCESSOR_COUNT)


def max_shared_memory_optin(device: int | None = None) -> int:
    device = current_device() if device is None else device
    return _attribute(device, ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)


def load_module(image: bytes) -> int:
    """cuModuleLoadData on a cubin image, in the current context."""
    ensure_context()
    mod = _void_p()
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
    """cuLaunchKernel. ``args`` are ctypes scalars matching the kernel's parameter list exactly."""
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


# --- memory and streams: used by the GPU tests, never by the launch path -----------------------


def mem_alloc(nbytes: int) -> int:
    ensure_context()
    ptr = ctypes.c_uint64()
    _call("cuMemAlloc_v2", ctypes.byref(ptr), max(int(nbytes), 1))
    return ptr.value


def mem_free(ptr: int) -> None:
    _call("cuMemFree_v2", ctypes.c_uint64(ptr))


def memcpy_htod(dst: int, host_ptr: int, nbytes: int) -> None:
    """Copy ``nbytes`` from host address ``host_ptr`` (e.g. ``ndarray.ctypes.data``)."""
    _call("cuMemcpyHtoD_v2", ctypes.c_uint64(dst), _void_p(host_ptr), nbytes)


def memcpy_dtoh(host_ptr: int, src: int, nbytes: int) -> None:
    _call("cuMemcpyDtoH_v2", _void_p(host_ptr), ctypes.c_uint64(src), nbytes)


def memset_d8(ptr: int, value: int, nbytes: int) -> None:
    _call("cuMemsetD8_v2", ctypes.c_uint64(ptr), value, nbytes)


def synchronize() -> None:
    _call("cuCtxSynchronize")


def stream_create() -> int:
    ensure_context()
    s = _void_p()
    _call("cuStreamCreate", ctypes.byref(s), 1)  # CU_STREAM_NON_BLOCKING
    return s.value


def stream_synchronize(stream: int) -> None:
    _call("cuStreamSynchronize", _void_p(stream or None))


def stream_destroy(stream: int) -> None:
    _call("cuStreamDestroy_v2", _void_p(stream))
