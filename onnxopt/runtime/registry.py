"""Where kernels are declared: one record per (domain, op, execution provider).

A declaration says what ORT must know before any tensor flows (inputs, outputs,
their dtypes, optional/variadic, attribute types) and which Python function
computes the op. The function's keyword-only parameter defaults are the
attribute defaults, so a kernel reads like the NumPy function it is:

    @cpu_kernel("ai.onnxopt", "ScaledAdd", inputs=["a: float32", "b: float32"],
                outputs=["y: float32"], attrs={"alpha": float})
    def scaled_add(a, b, *, alpha=1.0):
        return a + alpha * b
"""

from __future__ import annotations

import inspect
import itertools
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .tensors import element_type

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"

ATTRIBUTE_TYPES: tuple[Any, ...] = (float, int, str, list[float], list[int])
_PORT = re.compile(r"^\s*(?P<name>[A-Za-z_][\w.]*)\s*(?P<mark>[?*]?)\s*(:\s*(?P<dtype>\w+)\s*)?$")
_NO_DEFAULT = inspect.Parameter.empty
# Unique across registries: the bridge caches ORT-side structs by serial.
_serials = itertools.count(1)


@dataclass(frozen=True)
class Port:
    """One declared input or output.

    `optional` inputs may be absent (the kernel then gets None); a `variadic`
    port must be the last input and collects every remaining tensor. `on_cpu`
    asks a CUDA kernel's input to stay in host memory (e.g. a shape tensor).
    """

    name: str
    dtype: str = "any"
    optional: bool = False
    variadic: bool = False
    on_cpu: bool = False

    def __post_init__(self) -> None:
        element_type(self.dtype)  # validates the name
        if self.optional and self.variadic:
            raise ValueError(f"port {self.name!r} cannot be both optional and variadic")

    @classmethod
    def parse(cls, spec: str | Port) -> Port:
        """`"x: float32"`, `"residual?: float32"` (optional), `"xs*: float32"` (variadic)."""
        if isinstance(spec, Port):
            return spec
        match = _PORT.match(spec)
        if match is None:
            raise ValueError(
                f"cannot read port {spec!r}; write it as 'name: dtype', 'name?: dtype'"
            )
        mark = match["mark"]
        return cls(
            match["name"], match["dtype"] or "any", optional=mark == "?", variadic=mark == "*"
        )


@dataclass(frozen=True)
class Attribute:
    name: str
    type: Any
    default: Any = _NO_DEFAULT

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT


@dataclass(frozen=True, eq=False)
class KernelSpec:
    """Everything the bridge needs to expose one Python kernel as an ORT custom op."""

    domain: str
    op_type: str
    provider: str
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    attributes: tuple[Attribute, ...]
    fn: Callable[..., Any]
    shape: Callable[..., Sequence[Sequence[int]]] | None = None
    serial: int = field(default=0, compare=False)  # process-unique, keys the bridge's caches

    @property
    def qualified_name(self) -> str:
        return f"{self.domain}::{self.op_type}"


def _attributes(fn: Callable[..., Any], declared: dict[str, Any]) -> tuple[Attribute, ...]:
    params = inspect.signature(fn).parameters
    result = []
    for name, kind in declared.items():
        if kind not in ATTRIBUTE_TYPES:
            raise TypeError(f"attribute {name!r}: type {kind!r} is not one of {ATTRIBUTE_TYPES}")
        param = params.get(name)
        default = param.default if param is not None else _NO_DEFAULT
        result.append(Attribute(name, kind, default))
    return tuple(result)


def _check_ports(op: str, inputs: tuple[Port, ...], outputs: tuple[Port, ...]) -> None:
    for i, port in enumerate(inputs):
        if port.variadic and i != len(inputs) - 1:
            raise ValueError(f"{op}: variadic input {port.name!r} must be the last input")
    if any(port.variadic for port in outputs):
        raise ValueError(f"{op}: variadic outputs are not supported")
    if not outputs:
        raise ValueError(f"{op}: a kernel needs at least one output")


def _signature(inputs: tuple[Port, ...], outputs: tuple[Port, ...]) -> tuple[str, ...]:
    return tuple(p.dtype for p in (*inputs, *outputs))


class KernelRegistry:
    """Kernels by (domain, op type, provider, declared dtypes). Declaring a key again replaces it.

    The dtypes are part of the key because ORT dispatches among the kernels of one op by
    their input types: an op may have one kernel per dtype (float16, bfloat16, float32), and
    ORT allows only one dynamically typed ("any") input when an output's type must follow it.
    """

    def __init__(self) -> None:
        self._kernels: dict[tuple[str, str, str, tuple[str, ...]], KernelSpec] = {}
        self._lock = threading.Lock()

    def declare(
        self,
        domain: str,
        op_type: str,
        *,
        provider: str,
        inputs: Sequence[str | Port],
        outputs: Sequence[str | Port],
        attrs: dict[str, Any] | None = None,
        shape: Callable[..., Sequence[Sequence[int]]] | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator recording `fn` as the kernel; returns `fn` unchanged."""
        in_ports = tuple(Port.parse(p) for p in inputs)
        out_ports = tuple(Port.parse(p) for p in outputs)
        _check_ports(f"{domain}::{op_type}", in_ports, out_ports)
        if provider == CUDA and shape is None:
            raise ValueError(f"{domain}::{op_type}: a CUDA kernel needs a shape function")

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            spec = KernelSpec(
                domain,
                op_type,
                provider,
                in_ports,
                out_ports,
                _attributes(fn, attrs or {}),
                fn,
                shape,
                next(_serials),
            )
            with self._lock:
                self._kernels[(domain, op_type, provider, _signature(in_ports, out_ports))] = spec
            return fn

        return decorate

    def domains(self) -> set[str]:
        with self._lock:
            return {key[0] for key in self._kernels}

    def kernels(self, domain: str | None = None) -> list[KernelSpec]:
        with self._lock:
            return [k for k in self._kernels.values() if domain is None or k.domain == domain]

    def providers_of(self, domain: str, op_type: str) -> set[str]:
        with self._lock:
            return {key[2] for key in self._kernels if key[:2] == (domain, op_type)}

    def remove(self, domain: str, op_type: str, provider: str | None = None) -> None:
        with self._lock:
            for key in [k for k in self._kernels if k[:2] == (domain, op_type)]:
                if provider is None or key[2] == provider:
                    del self._kernels[key]


REGISTRY = KernelRegistry()


def cpu_kernel(
    domain: str,
    op_type: str,
    *,
    inputs: Sequence[str | Port],
    outputs: Sequence[str | Port],
    attrs: dict[str, Any] | None = None,
    shape: Callable[..., Sequence[Sequence[int]]] | None = None,
    registry: KernelRegistry | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a NumPy kernel for ORT's CPU execution provider.

    Without `shape`, `fn(*inputs, **attrs)` returns one array per output (a tuple
    for several); the bridge copies them into ORT's buffers. With `shape`,
    `shape(*inputs, **attrs)` returns one shape per output, the bridge allocates
    ORT's outputs first and calls `fn(*inputs, out=..., **attrs)` with writable
    views of them (one array, or a tuple for several outputs): no copy at all.
    """
    return (registry or REGISTRY).declare(
        domain, op_type, provider=CPU, inputs=inputs, outputs=outputs, attrs=attrs, shape=shape
    )


def cuda_kernel(
    domain: str,
    op_type: str,
    *,
    inputs: Sequence[str | Port],
    outputs: Sequence[str | Port],
    shape: Callable[..., Sequence[Sequence[int]]],
    attrs: dict[str, Any] | None = None,
    registry: KernelRegistry | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a kernel for ORT's CUDA execution provider.

    `shape(*inputs, **attrs)` sees `DeviceTensor`s (shape/dtype only, the data is
    on the device) and returns the output shapes; then
    `fn(ctx, *inputs, out=..., **attrs)` gets device tensors and `ctx.stream`,
    ORT's CUDA compute stream, on which it must launch its work.
    """
    return (registry or REGISTRY).declare(
        domain, op_type, provider=CUDA, inputs=inputs, outputs=outputs, attrs=attrs, shape=shape
    )
