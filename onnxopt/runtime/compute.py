"""The per-call path: ORT's kernel context in, the Python kernel called, ORT's outputs filled.

This is the only code that runs on every inference, so it does the least it
can: element types come from the declaration when it names one, inputs are
views of ORT's memory, and a kernel with a shape function writes straight into
ORT's output buffers.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from .ortapi import OrtApi
from .registry import CUDA, KernelSpec, Port
from .tensors import UNDEFINED, DeviceTensor, element_type, host_view, numpy_dtype


class KernelContext:
    """What a CUDA kernel gets as its first argument: ORT's compute stream for this call."""

    __slots__ = ("stream",)

    def __init__(self, stream: int) -> None:
        self.stream = stream


class KernelInstance:
    """One node's kernel: its spec and attribute values, run on each call."""

    def __init__(self, api: OrtApi, spec: KernelSpec, attrs: dict[str, Any]) -> None:
        self.api = api
        self.spec = spec
        self.attrs = attrs
        self.on_device = spec.provider == CUDA
        self._in_codes = [element_type(p.dtype) for p in spec.inputs]
        self._out_codes = [element_type(p.dtype) for p in spec.outputs]
        self._variadic = bool(spec.inputs) and spec.inputs[-1].variadic
        # Counts are only asked of ORT when the declaration leaves them open: each
        # ctypes call costs about half a microsecond on every inference.
        self._ask_input_count = any(p.optional or p.variadic for p in spec.inputs)
        self._ask_output_count = any(p.optional for p in spec.outputs)

    # -- reading ------------------------------------------------------------------
    def _tensor(self, value: int, declared: int, port: Port, writeable: bool) -> Any:
        api = self.api
        info = ctypes.c_void_p()
        api.check(api.GetTensorTypeAndShape(value, ctypes.byref(info)), "GetTensorTypeAndShape")
        try:
            ndim = ctypes.c_size_t()
            api.check(api.GetDimensionsCount(info, ctypes.byref(ndim)), "GetDimensionsCount")
            dims = (ctypes.c_int64 * ndim.value)()
            api.check(api.GetDimensions(info, dims, ndim.value), "GetDimensions")
            code = declared
            if code == UNDEFINED:
                out = ctypes.c_int()
                api.check(api.GetTensorElementType(info, ctypes.byref(out)), "GetTensorElementType")
                code = out.value
        finally:
            api.ReleaseTensorTypeAndShapeInfo(info)
        data = ctypes.c_void_p()
        api.check(api.GetTensorMutableData(value, ctypes.byref(data)), "GetTensorMutableData")
        shape = tuple(dims)
        if self.on_device and not port.on_cpu:
            return DeviceTensor(data.value or 0, shape, numpy_dtype(code), readonly=not writeable)
        return host_view(data.value, shape, numpy_dtype(code), writeable)

    def _inputs(self, ctx: int) -> list[Any]:
        api = self.api
        ports, codes = self.spec.inputs, self._in_codes
        available = len(ports)
        if self._ask_input_count:
            count = ctypes.c_size_t()
            api.check(api.KernelContext_GetInputCount(ctx, ctypes.byref(count)), "GetInputCount")
            available = count.value
        total = available if self._variadic else len(ports)
        values = []
        for i in range(total):
            port_index = min(i, len(ports) - 1)
            if i >= available:
                values.append(None)
                continue
            value = ctypes.c_void_p()
            api.check(api.KernelContext_GetInput(ctx, i, ctypes.byref(value)), "GetInput")
            if not value.value:
                values.append(None)
                continue
            values.append(self._tensor(value.value, codes[port_index], ports[port_index], False))
        return values

    # -- writing ------------------------------------------------------------------
    def _output(self, ctx: int, index: int, shape: Sequence[int]) -> Any:
        api = self.api
        dims = (ctypes.c_int64 * len(shape))(*shape)
        value = ctypes.c_void_p()
        api.check(
            api.KernelContext_GetOutput(ctx, index, dims, len(shape), ctypes.byref(value)),
            "GetOutput",
        )
        if not value.value:  # an optional output the node does not use
            return None
        port = self.spec.outputs[index]
        code = self._out_codes[index]
        if code == UNDEFINED:
            return self._tensor(value.value, UNDEFINED, port, True)
        data = ctypes.c_void_p()
        api.check(api.GetTensorMutableData(value.value, ctypes.byref(data)), "GetTensorMutableData")
        shape = tuple(int(d) for d in shape)
        if self.on_device:
            return DeviceTensor(data.value or 0, shape, numpy_dtype(code))
        return host_view(data.value, shape, numpy_dtype(code), True)

    def _output_count(self, ctx: int) -> int:
        if not self._ask_output_count:
            return len(self.spec.outputs)
        count = ctypes.c_size_t()
        self.api.check(
            self.api.KernelContext_GetOutputCount(ctx, ctypes.byref(count)), "GetOutputCount"
        )
        return min(count.value, len(self.spec.outputs))

    def _allocate(self, ctx: int, shapes: Sequence[Sequence[int]]) -> list[Any]:
        n = self._output_count(ctx)
        if len(shapes) != len(self.spec.outputs):
            raise ValueError(
                f"shape function returned {len(shapes)} shapes for {len(self.spec.outputs)} outputs"
            )
        outs = [self._output(ctx, i, shapes[i]) for i in range(n)]
        return outs + [None] * (len(self.spec.outputs) - n)

    # -- the call -----------------------------------------------------------------
    def compute(self, ctx: int) -> None:
        spec = self.spec
        inputs = self._inputs(ctx)
        if self.on_device:
            self._compute_device(ctx, inputs)
        elif spec.shape is not None:
            outs = self._allocate(ctx, spec.shape(*inputs, **self.attrs))
            spec.fn(*inputs, out=outs[0] if len(spec.outputs) == 1 else tuple(outs), **self.attrs)
        else:
            self._copy_results(ctx, spec.fn(*inputs, **self.attrs))

    def _copy_results(self, ctx: int, results: Any) -> None:
        if len(self.spec.outputs) == 1:
            results = (results,)
        elif not isinstance(results, (tuple, list)) or len(results) != len(self.spec.outputs):
            raise TypeError(f"kernel must return a tuple of {len(self.spec.outputs)} arrays")
        for i in range(self._output_count(ctx)):
            result = np.asarray(results[i])
            target = self._output(ctx, i, result.shape)
            if target is not None:
                np.copyto(target, result, casting="same_kind")

    def _compute_device(self, ctx: int, inputs: list[Any]) -> None:
        stream = ctypes.c_void_p()
        self.api.check(
            self.api.KernelContext_GetGPUComputeStream(ctx, ctypes.byref(stream)),
            "GetGPUComputeStream",
        )
        outs = self._allocate(ctx, self.spec.shape(*inputs, **self.attrs))
        out = outs[0] if len(self.spec.outputs) == 1 else tuple(outs)
        self.spec.fn(KernelContext(stream.value or 0), *inputs, out=out, **self.attrs)
