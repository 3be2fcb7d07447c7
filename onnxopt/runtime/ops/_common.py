"""What the ops of domain ``ai.onnxopt.cuda`` share: the dtypes, and declaring one op for every
dtype on both providers from the kernel family's declaration.

Each op's ports and attributes are read from ``kernels/<family>.json`` ("ops"), the one
declaration of the kernel, and declared once per dtype (ORT dispatches by input type among
kernels of one name): a CPU kernel, the float64 NumPy reference of
``onnxopt.reference`` (always registered, so a model optimized for CUDA runs
anywhere and CI tests the bridge end to end), and a CUDA kernel that launches
``kernels/*.cu`` on ORT's compute stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxopt.runtime.cuda import DOMAIN, OPSET, metadata
from onnxopt.runtime.registry import REGISTRY, KernelRegistry, Port, cpu_kernel, cuda_kernel

DTYPES = ("float16", "bfloat16", "float32")
_ATTR_TYPES = {"float": float, "int": int, "str": str}

__all__ = ["DOMAIN", "DTYPES", "OPSET", "address", "declare", "dtype_name"]


def _ports(specs: Sequence[str], dtype: str) -> list[Port]:
    """``"x: T"`` -> ``x: <dtype>``."""
    return [Port.parse(spec.replace(": T", f": {dtype}")) for spec in specs]


def declare(
    family: str,
    op_type: str,
    *,
    cpu: Callable[..., Any],
    cuda: Callable[..., Any],
    shape: Callable[..., Sequence[Sequence[int]]],
    dtypes: Sequence[str] = DTYPES,
    registry: KernelRegistry | None = None,
) -> None:
    """Declare ``op_type`` of ``family`` (ports and attributes from its JSON) for every dtype
    in ``dtypes``, with a CPU and a CUDA kernel each."""
    registry = registry or REGISTRY
    spec = metadata.ops(family)[op_type]
    attrs = {name: _ATTR_TYPES[kind] for name, kind in spec["attrs"].items()}
    for dtype in dtypes:
        inputs, outputs = _ports(spec["inputs"], dtype), _ports(spec["outputs"], dtype)
        cpu_kernel(DOMAIN, op_type, inputs=inputs, outputs=outputs, attrs=attrs,
                   registry=registry)(cpu)
        cuda_kernel(DOMAIN, op_type, inputs=inputs, outputs=outputs, attrs=attrs, shape=shape,
                    registry=registry)(cuda)


def dtype_name(dtype: np.dtype) -> str:
    """"float16" / "bfloat16" / "float32" for a NumPy (or ml_dtypes) dtype."""
    return np.dtype(dtype).name


def address(tensor: Any) -> int:
    """A DeviceTensor's pointer, 0 for an absent optional input or output."""
    return 0 if tensor is None else int(tensor.ptr)
