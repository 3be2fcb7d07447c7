"""The few OrtApi functions the bridge calls, bound by slot through ctypes.

The onnxruntime wheel ships no C headers, but the OrtApi table is append-only
across versions, so a slot index plus a signature is a stable contract. The
slots below were checked against the `offsetof(OrtApi, ...)` asserts in ORT's
header; signatures follow `onnxruntime_c_api.h`.

Calls use PYFUNCTYPE (the GIL stays held): every call is a few hundred
nanoseconds and made from inside a ctypes callback that already holds the GIL,
so releasing and re-taking it would only add cost.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_float, c_int, c_int64, c_size_t, c_uint32, c_void_p

API_VERSION = 16  # the first version with status-returning kernel callbacks (V2)

ORT_FAIL = 1
ORT_INVALID_ARGUMENT = 2
ORT_RUNTIME_EXCEPTION = 6

_S = c_void_p  # OrtStatus*: NULL means success

# slot: (name, restype, argtypes)
_SIGNATURES = {
    0: ("CreateStatus", c_void_p, (c_int, c_char_p)),
    1: ("GetErrorCode", c_int, (c_void_p,)),
    2: ("GetErrorMessage", c_char_p, (c_void_p,)),
    26: ("CreateCustomOpDomain", _S, (c_char_p, POINTER(c_void_p))),
    27: ("CustomOpDomain_Add", _S, (c_void_p, c_void_p)),
    28: ("AddCustomOpDomain", _S, (c_void_p, c_void_p)),
    51: ("GetTensorMutableData", _S, (c_void_p, POINTER(c_void_p))),
    60: ("GetTensorElementType", _S, (c_void_p, POINTER(c_int))),
    61: ("GetDimensionsCount", _S, (c_void_p, POINTER(c_size_t))),
    62: ("GetDimensions", _S, (c_void_p, POINTER(c_int64), c_size_t)),
    65: ("GetTensorTypeAndShape", _S, (c_void_p, POINTER(c_void_p))),
    85: ("KernelInfoGetAttribute_float", _S, (c_void_p, c_char_p, POINTER(c_float))),
    86: ("KernelInfoGetAttribute_int64", _S, (c_void_p, c_char_p, POINTER(c_int64))),
    87: ("KernelInfoGetAttribute_string", _S, (c_void_p, c_char_p, c_void_p, POINTER(c_size_t))),
    88: ("KernelContext_GetInputCount", _S, (c_void_p, POINTER(c_size_t))),
    89: ("KernelContext_GetOutputCount", _S, (c_void_p, POINTER(c_size_t))),
    90: ("KernelContext_GetInput", _S, (c_void_p, c_size_t, POINTER(c_void_p))),
    91: (
        "KernelContext_GetOutput",
        _S,
        (c_void_p, c_size_t, POINTER(c_int64), c_size_t, POINTER(c_void_p)),
    ),
    93: ("ReleaseStatus", None, (c_void_p,)),
    99: ("ReleaseTensorTypeAndShapeInfo", None, (c_void_p,)),
    162: (
        "KernelInfoGetAttributeArray_float",
        _S,
        (c_void_p, c_char_p, c_void_p, POINTER(c_size_t)),
    ),
    163: (
        "KernelInfoGetAttributeArray_int64",
        _S,
        (c_void_p, c_char_p, c_void_p, POINTER(c_size_t)),
    ),
    193: ("KernelContext_GetGPUComputeStream", _S, (c_void_p, POINTER(c_void_p))),
}


class OrtCallError(RuntimeError):
    """An OrtApi call returned a non-OK status; the message is ORT's."""

    def __init__(self, function: str, code: int, message: str) -> None:
        super().__init__(f"{function}: {message}")
        self.code = code


class OrtApi:
    """Typed callables for the OrtApi table at `address`, as attributes named after ORT's."""

    def __init__(self, address: int) -> None:
        self.address = address
        table = (c_void_p * (max(_SIGNATURES) + 1)).from_address(address)
        for slot, (name, restype, argtypes) in _SIGNATURES.items():
            prototype = ctypes.PYFUNCTYPE(restype, *argtypes)
            setattr(self, name, prototype(table[slot]))

    @classmethod
    def from_api_base(cls, api_base: int) -> OrtApi:
        """Ask `OrtApiBase->GetApi(API_VERSION)` for the table."""
        get_api = ctypes.PYFUNCTYPE(c_void_p, c_uint32)(c_void_p.from_address(api_base).value)
        address = get_api(API_VERSION)
        if not address:
            raise RuntimeError(f"this onnxruntime does not provide OrtApi version {API_VERSION}")
        return cls(address)

    def status(self, code: int, message: str) -> int:
        """A new OrtStatus* that ORT takes ownership of when a callback returns it."""
        return self.CreateStatus(code, message.encode("utf-8", "replace"))

    def check(self, status: int | None, function: str) -> None:
        """Raise OrtCallError for a non-NULL status, releasing it."""
        if status:
            code = self.GetErrorCode(status)
            message = (self.GetErrorMessage(status) or b"").decode("utf-8", "replace")
            self.ReleaseStatus(status)
            raise OrtCallError(function, code, message)


_bound: OrtApi | None = None


def bind(api_base: int) -> OrtApi:
    """The process-wide OrtApi, taken from the first OrtApiBase ORT hands us."""
    global _bound
    if _bound is None:
        _bound = OrtApi.from_api_base(api_base)
    return _bound


def current() -> OrtApi:
    """The bound OrtApi; only valid once ORT has called RegisterCustomOps."""
    if _bound is None:
        raise RuntimeError("OrtApi is not bound yet: no custom-op library was registered")
    return _bound
