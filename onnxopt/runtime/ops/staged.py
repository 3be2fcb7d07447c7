"""The CUDA kernels behind ORT's *CPU* provider, copying through the device on every call.

For machines with a GPU but a CPU-only onnxruntime build (the GPU check machine has
onnxruntime 1.30 CPU): ``session(path, registry=staged_registry())`` runs every
``ai.onnxopt.cuda`` op by uploading its inputs, launching the same CUDA kernel function ORT's
CUDA provider would call, synchronising and downloading the outputs. That is a measurement
and correctness path, not a fast one: its times include two copies and a synchronisation per
op. ``StageTimes`` splits them so that kernel time and end-to-end time are reported apart.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from onnxopt.runtime.compute import KernelContext
from onnxopt.runtime.registry import CPU, CUDA, REGISTRY, KernelRegistry, KernelSpec, Port
from onnxopt.runtime.tensors import DeviceTensor

from ._common import DOMAIN


@dataclass
class StageTimes:
    """Seconds spent per phase, summed over calls (host clock around synchronous steps)."""

    upload: float = 0.0
    kernel: float = 0.0  # launch + cuCtxSynchronize
    download: float = 0.0
    calls: int = 0
    by_op: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def reset(self) -> None:
        self.upload = self.kernel = self.download = 0.0
        self.calls = 0
        self.by_op.clear()


class _Pool:
    """Device buffers (PyCUDA allocations) reused by size, so steady-state calls allocate
    nothing."""

    def __init__(self) -> None:
        self.free: dict[int, list] = defaultdict(list)
        self.used: list[tuple[int, object]] = []

    def take(self, nbytes: int) -> int:
        from onnxopt.runtime.cuda import loader, pycuda_backend

        size = max(256, -(-nbytes // 256) * 256)
        if self.free[size]:
            alloc = self.free[size].pop()
        else:
            loader.ensure_context()
            alloc = pycuda_backend.mem_alloc(size)
        self.used.append((size, alloc))
        return int(alloc)

    def give_back(self) -> None:
        for size, ptr in self.used:
            self.free[size].append(ptr)
        self.used.clear()


_lock = threading.Lock()
_pool = _Pool()
TIMES = StageTimes()


def _staged(spec: KernelSpec):
    @functools.wraps(spec.fn)  # the declaration reads attribute defaults from the signature
    def run(*inputs, out, **attrs):
        from onnxopt.runtime.cuda import pycuda_backend as pyc

        host_outs = out if isinstance(out, tuple) else (out,)
        with _lock:
            t0 = time.perf_counter()
            args = []
            for value, port in zip(inputs, spec.inputs):
                if value is None or port.on_cpu:
                    args.append(value)
                    continue
                host = np.ascontiguousarray(value)
                ptr = _pool.take(host.nbytes)
                if host.nbytes:
                    pyc.memcpy_htod(ptr, host)
                args.append(DeviceTensor(ptr, tuple(host.shape), host.dtype, readonly=True))
            # Only the outputs the node has (ORT passes None for an absent optional one).
            outs = [None if h is None else DeviceTensor(_pool.take(h.nbytes), h.shape, h.dtype)
                    for h in host_outs]
            t1 = time.perf_counter()
            try:
                spec.fn(KernelContext(0), *args, out=outs[0] if len(outs) == 1 else tuple(outs),
                        **attrs)
                pyc.synchronize()
                t2 = time.perf_counter()
                for h, d in zip(host_outs, outs):
                    if h is not None and h.nbytes:
                        pyc.memcpy_dtoh(h, d.ptr)
            finally:
                _pool.give_back()
            t3 = time.perf_counter()
            TIMES.upload += t1 - t0
            TIMES.kernel += t2 - t1
            TIMES.download += t3 - t2
            TIMES.calls += 1
            TIMES.by_op[spec.op_type] += t2 - t1

    return run


def staged_registry(registry: KernelRegistry | None = None) -> KernelRegistry:
    """A registry whose CPU kernels of ``ai.onnxopt.cuda`` run the CUDA kernels via copies."""
    source = registry or REGISTRY
    staged = KernelRegistry()
    for spec in source.kernels(DOMAIN):
        if spec.provider != CUDA:
            continue
        inputs = [Port(p.name, p.dtype, p.optional, p.variadic) for p in spec.inputs]
        attrs = {a.name: a.type for a in spec.attributes}
        # With the CUDA kernel's shape function, ORT's output buffers are allocated first and
        # the downloads land in them directly.
        staged.declare(DOMAIN, spec.op_type, provider=CPU, inputs=inputs,
                       outputs=list(spec.outputs), attrs=attrs, shape=spec.shape)(_staged(spec))
    return staged
