"""An `OrtCustomOp` struct, filled with ctypes callbacks, for one KernelSpec.

ORT reads this struct through the version it claims, so the layout below stops
at the last member we fill (version 16, the status-returning V2 callbacks) and
claims exactly that. Rules learnt the hard way (see shared notes):

- v1 `CreateKernel`/`KernelCompute` are never NULL: they are stubs, unused
  because the V2 members are set, but ORT must not find a NULL there.
- `KernelDestroy`, the characteristic callbacks and `GetInputMemoryType` are
  always called, so they are always set.
- Every callback catches everything: an exception escaping a ctypes callback
  reads to ORT as success with unwritten outputs. Errors become an OrtStatus
  carrying the Python message.
- ORT keeps raw pointers to the struct, its strings and the thunks, so every
  `CustomOp` is kept alive for the life of the process (`_ALIVE`).
"""

from __future__ import annotations

import ctypes
import itertools
from ctypes import CFUNCTYPE, POINTER, c_int, c_size_t, c_uint32, c_void_p

from . import attributes, ortapi
from .compute import KernelInstance
from .registry import CUDA, KernelSpec
from .tensors import element_type

VERSION = 16

# OrtCustomOpInputOutputCharacteristic
REQUIRED, OPTIONAL, VARIADIC = 0, 1, 2
# OrtMemType
MEM_DEFAULT, MEM_CPU_INPUT = 0, -2

_CreateKernel = CFUNCTYPE(c_void_p, c_void_p, c_void_p, c_void_p)
_String = CFUNCTYPE(c_void_p, c_void_p)
_TypeAt = CFUNCTYPE(c_int, c_void_p, c_size_t)
_Count = CFUNCTYPE(c_size_t, c_void_p)
_Compute = CFUNCTYPE(None, c_void_p, c_void_p)
_Destroy = CFUNCTYPE(None, c_void_p)
_Int = CFUNCTYPE(c_int, c_void_p)
_CreateKernelV2 = CFUNCTYPE(c_void_p, c_void_p, c_void_p, c_void_p, POINTER(c_void_p))
_ComputeV2 = CFUNCTYPE(c_void_p, c_void_p, c_void_p)


class OrtCustomOpStruct(ctypes.Structure):
    """`struct OrtCustomOp` up to and including its version-16 members."""

    _fields_ = [
        ("version", c_uint32),
        ("CreateKernel", _CreateKernel),
        ("GetName", _String),
        ("GetExecutionProviderType", _String),
        ("GetInputType", _TypeAt),
        ("GetInputTypeCount", _Count),
        ("GetOutputType", _TypeAt),
        ("GetOutputTypeCount", _Count),
        ("KernelCompute", _Compute),
        ("KernelDestroy", _Destroy),
        ("GetInputCharacteristic", _TypeAt),  # 8
        ("GetOutputCharacteristic", _TypeAt),
        ("GetInputMemoryType", _TypeAt),  # 13
        ("GetVariadicInputMinArity", _Int),  # 14
        ("GetVariadicInputHomogeneity", _Int),
        ("GetVariadicOutputMinArity", _Int),
        ("GetVariadicOutputHomogeneity", _Int),
        ("CreateKernelV2", _CreateKernelV2),  # 16
        ("KernelComputeV2", _ComputeV2),
    ]


_instances: dict[int, KernelInstance] = {}
_next_id = itertools.count(1)
_ALIVE: list[CustomOp] = []


def _failure(where: str, error: BaseException) -> int | None:
    """An OrtStatus for `error`; ORT frees it."""
    try:
        message = f"{where}: {type(error).__name__}: {error}"
        return ortapi.current().status(ortapi.ORT_RUNTIME_EXCEPTION, message)
    except BaseException:  # noqa: BLE001 - nothing may escape a callback
        return None


@_CreateKernel
def _v1_create_kernel(op, api, info):
    return None


@_Compute
def _v1_compute(kernel, ctx):
    return None


@_Destroy
def _destroy(kernel):
    _instances.pop(kernel, None)  # cannot raise: an int key, a default given


@_ComputeV2
def _compute(kernel, ctx):
    instance = None
    try:
        instance = _instances[kernel]
        instance.compute(ctx)
        return None
    except BaseException as error:  # noqa: BLE001 - becomes ORT's error status
        name = instance.spec.qualified_name if instance is not None else "onnxopt kernel"
        return _failure(name, error)


class CustomOp:
    """The struct plus every object ORT will point into, for one kernel."""

    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        self._name = ctypes.create_string_buffer(spec.op_type.encode("utf-8"))
        self._provider = ctypes.create_string_buffer(spec.provider.encode("utf-8"))
        in_types = [element_type(p.dtype) for p in spec.inputs]
        out_types = [element_type(p.dtype) for p in spec.outputs]
        in_chars = [_characteristic(p) for p in spec.inputs]
        out_chars = [_characteristic(p) for p in spec.outputs]
        in_mem = [
            MEM_CPU_INPUT if spec.provider == CUDA and p.on_cpu else MEM_DEFAULT
            for p in spec.inputs
        ]
        name_address = ctypes.addressof(self._name)
        # ORT treats a NULL provider type as the CPU provider; name it anyway for clarity.
        provider_address = ctypes.addressof(self._provider)

        self.struct = OrtCustomOpStruct(
            version=VERSION,
            CreateKernel=_v1_create_kernel,
            GetName=_String(lambda op: name_address),
            GetExecutionProviderType=_String(lambda op: provider_address),
            GetInputType=_TypeAt(_lookup(in_types, 0)),
            GetInputTypeCount=_Count(lambda op: len(in_types)),
            GetOutputType=_TypeAt(_lookup(out_types, 0)),
            GetOutputTypeCount=_Count(lambda op: len(out_types)),
            KernelCompute=_v1_compute,
            KernelDestroy=_destroy,
            GetInputCharacteristic=_TypeAt(_lookup(in_chars, REQUIRED)),
            GetOutputCharacteristic=_TypeAt(_lookup(out_chars, REQUIRED)),
            GetInputMemoryType=_TypeAt(_lookup(in_mem, MEM_DEFAULT)),
            GetVariadicInputMinArity=_Int(lambda op: 1),
            GetVariadicInputHomogeneity=_Int(lambda op: 1),
            GetVariadicOutputMinArity=_Int(lambda op: 1),
            GetVariadicOutputHomogeneity=_Int(lambda op: 1),
            CreateKernelV2=_CreateKernelV2(self._create_kernel),
            KernelComputeV2=_compute,
        )
        _ALIVE.append(self)

    @property
    def address(self) -> int:
        return ctypes.addressof(self.struct)

    def _create_kernel(self, op, api, info, kernel_out):
        try:
            bound = ortapi.current()
            attrs = attributes.read_all(bound, info, self.spec)
            instance = KernelInstance(bound, self.spec, attrs)
            kernel_id = next(_next_id)
            _instances[kernel_id] = instance
            kernel_out[0] = kernel_id
            return None
        except BaseException as error:  # noqa: BLE001 - becomes ORT's error status
            return _failure(self.spec.qualified_name, error)


def _characteristic(port) -> int:
    return VARIADIC if port.variadic else OPTIONAL if port.optional else REQUIRED


def _lookup(values: list[int], default: int):
    """A total `(op, index) -> int` callback: ORT must never see an exception."""

    def get(op, index):
        return values[index] if index < len(values) else default

    return get
