"""Launch wrappers for ``kernels/activations.cu`` (semantics: ``reference.bias_gelu`` /
``reference.swiglu`` / ``reference.swiglu_fused``)."""

from __future__ import annotations

import math
from typing import Any

from . import driver, launch_args, loader, metadata
from ._args import aligned, canonical_dtype, cdiv, check_positive

FAMILY = "activations"
THREADS = 256
_APPROXIMATE = metadata.load(FAMILY)["approximate"]


def select_variant(op: str, dtype: str, cols: int, *ptrs: int) -> dict[str, Any]:
    """The widest vector variant of ``op`` that ``cols`` and the pointers' alignment allow."""
    dtype = canonical_dtype(dtype)
    options = sorted(
        (v for v in metadata.variants(FAMILY) if v["op"] == op and v["dtype"] == dtype),
        key=lambda v: -v["VEC"],
    )
    for v in options:
        if v["VEC"] == 1 or (cols % v["VEC"] == 0 and aligned(16, *ptrs)):
            return v
    raise ValueError(f"no {op} kernel for {dtype}")


def _grid(n_vectors: int) -> tuple[int, int, int]:
    # Grid-stride loops: enough blocks to fill the device a few times over, no more.
    sms = loader.device_limits().sm_count or 1
    return (max(1, min(cdiv(n_vectors, THREADS), sms * 16)), 1, 1)


def bias_gelu(
    x_ptr: int,
    bias_ptr: int,
    y_ptr: int,
    rows: int,
    cols: int,
    approximate: str = "none",
    dtype: str = "float16",
    stream: int = 0,
) -> None:
    """y = GELU(x + bias) on [rows, cols]; bias [cols] or 0; approximate "none" (erf) or "tanh"."""
    check_positive(cols=cols)
    if approximate not in _APPROXIMATE:
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    if not x_ptr or not y_ptr:
        raise ValueError("x and y must be non-null device pointers")
    if rows <= 0:
        return
    v = select_variant("gelu", dtype, cols, x_ptr, bias_ptr, y_ptr)
    kernel = loader.get(FAMILY, v["entry"])
    args = launch_args.pack(FAMILY, {
        "x": x_ptr, "bias": bias_ptr, "y": y_ptr, "rows": rows, "N": cols,
        "approximate": _APPROXIMATE[approximate],
    }, op="gelu")
    grid = _grid(rows * cols // v["VEC"])
    driver.launch(kernel.function, grid, (THREADS, 1, 1), args, kernel.smem, stream)


def swiglu(
    gate_ptr: int,
    up_ptr: int,
    y_ptr: int,
    rows: int,
    cols: int,
    dtype: str = "float16",
    stream: int = 0,
    *,
    in_stride: int | None = None,
) -> None:
    """y = silu(gate) * up on [rows, cols]; gate/up rows are ``in_stride`` elements apart
    (default cols: two separate tensors)."""
    check_positive(cols=cols)
    if not (gate_ptr and up_ptr and y_ptr):
        raise ValueError("gate, up and y must be non-null device pointers")
    if rows <= 0:
        return
    in_stride = cols if in_stride is None else in_stride
    if in_stride < cols:
        raise ValueError(f"in_stride {in_stride} is shorter than a row ({cols})")
    # A vector must not straddle rows and every row start must stay aligned: VEC | gcd.
    v = select_variant("swiglu", dtype, math.gcd(cols, in_stride), gate_ptr, up_ptr, y_ptr)
    kernel = loader.get(FAMILY, v["entry"])
    args = launch_args.pack(FAMILY, {
        "gate": gate_ptr, "up": up_ptr, "y": y_ptr, "rows": rows, "N": cols,
        "in_stride": in_stride,
    }, op="swiglu")
    grid = _grid(rows * cols // v["VEC"])
    driver.launch(kernel.function, grid, (THREADS, 1, 1), args, kernel.smem, stream)


def swiglu_fused(
    x_ptr: int,
    y_ptr: int,
    rows: int,
    cols: int,
    dtype: str = "float16",
    stream: int = 0,
) -> None:
    """y [rows, cols] = silu(x[:, :cols]) * x[:, cols:] for x [rows, 2 * cols] (gate first)."""
    esize = metadata.ELEM_BYTES[canonical_dtype(dtype)]
    swiglu(
        x_ptr,
        x_ptr + cols * esize if x_ptr else 0,
        y_ptr,
        rows,
        cols,
        dtype,
        stream,
        in_stride=2 * cols,
    )
