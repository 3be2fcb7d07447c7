"""What the ops of domain ``ai.onnxopt.cuda`` share: the domain, the dtypes, declaring one op
for every dtype on both providers, and the key-padding check.

Each op is declared once per dtype (ORT dispatches by input type among kernels of one name):
a CPU kernel, the float64 NumPy reference of ``onnxopt.runtime.cuda.reference`` (always
registered, so a model optimized for CUDA runs anywhere and CI tests the bridge end to end),
and a CUDA kernel that launches ``kernels/*.cu`` on ORT's compute stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxopt.runtime.registry import REGISTRY, KernelRegistry, Port, cpu_kernel, cuda_kernel

DOMAIN = "ai.onnxopt.cuda"
OPSET = 1
DTYPES = ("float16", "bfloat16", "float32")


def _ports(specs: Sequence[str | Port], dtype: str, *, for_cuda: bool) -> list[Port]:
    """``"x: T"`` -> ``x: <dtype>``; a Port object is kept (its ``on_cpu`` only for CUDA)."""
    ports = []
    for spec in specs:
        if isinstance(spec, Port):
            ports.append(spec if for_cuda else Port(spec.name, spec.dtype, spec.optional,
                                                    spec.variadic))
            continue
        port = Port.parse(spec.replace(": T", f": {dtype}"))
        ports.append(port)
    return ports


def declare(
    op_type: str,
    *,
    inputs: Sequence[str | Port],
    outputs: Sequence[str],
    attrs: dict[str, Any],
    cpu: Callable[..., Any],
    cuda: Callable[..., Any],
    shape: Callable[..., Sequence[Sequence[int]]],
    dtypes: Sequence[str] = DTYPES,
    registry: KernelRegistry | None = None,
) -> None:
    """Declare ``op_type`` for every dtype in ``dtypes``, with a CPU and a CUDA kernel each."""
    registry = registry or REGISTRY
    for dtype in dtypes:
        cpu_kernel(DOMAIN, op_type, inputs=_ports(inputs, dtype, for_cuda=False),
                   outputs=_ports(outputs, dtype, for_cuda=False), attrs=attrs,
                   registry=registry)(cpu)
        cuda_kernel(DOMAIN, op_type, inputs=_ports(inputs, dtype, for_cuda=True),
                    outputs=_ports(outputs, dtype, for_cuda=True), attrs=attrs, shape=shape,
                    registry=registry)(cuda)


def dtype_name(dtype: np.dtype) -> str:
    """"float16" / "bfloat16" / "float32" for a NumPy (or ml_dtypes) dtype."""
    return np.dtype(dtype).name


def address(tensor: Any) -> int:
    """A DeviceTensor's pointer, 0 for an absent optional input or output."""
    return 0 if tensor is None else int(tensor.ptr)


def right_padded_lengths(mask: np.ndarray) -> np.ndarray:
    """Per-row key counts of a ``[B, Skv]`` key-padding mask (nonzero = keep), as int32.

    The attention kernel takes key padding as one length per batch row, which is the same
    thing as the mask only when every row is *right-padded*: kept keys first, then padding
    (``1 1 1 0 0``). Nothing in a graph proves that statically (left padding, or holes, are
    legal inputs of the original model), so the kernels check it on every call and raise
    rather than compute a different function.
    """
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"key_padding_mask must be [batch, keys], got shape {list(mask.shape)}")
    keep = mask != 0
    holes = keep[:, 1:] & ~keep[:, :-1]  # a kept key right after a padded one
    if holes.any():
        row = int(np.flatnonzero(holes.any(axis=1))[0])
        raise ValueError(
            f"key_padding_mask row {row} is not right-padded (kept keys first, then padding): "
            "onnxopt's attention kernel takes key padding as per-row lengths, so it refuses "
            "left padding or holes; optimize for --target cpu, or feed right-padded batches"
        )
    lengths = keep.sum(axis=1, dtype=np.int32)
    if (lengths == 0).any():
        row = int(np.flatnonzero(lengths == 0)[0])
        # Every key masked: the original model gives that row some value (uniform weights under
        # a finite mask, NaN or 0 under -inf); the kernel's 0 would only sometimes agree.
        raise ValueError(f"key_padding_mask row {row} masks every key; onnxopt's attention kernel "
                         "cannot reproduce the original model's output for such a row")
    return lengths
