"""``ai.onnxopt.cuda::BiasGelu`` and ``::SwiGLU``: ``kernels/activations.cu`` as ORT custom ops.

    Y = BiasGelu(X, bias?) <approximate: str ("none" | "tanh")>
    Y = SwiGLU(gate, up)                                      silu(gate) * up

One dtype for all tensors; ``bias`` is ``[X.shape[-1]]``; gate and up have one shape. The
launch wrapper picks the vector width per call; the node names no specialisation.
"""

from __future__ import annotations

import numpy as np

from onnxopt import reference as ref
from onnxopt.runtime.cuda import bias_gelu, swiglu

from ._common import address, declare, dtype_name


def _rows_cols(shape) -> tuple[int, int]:
    shape = tuple(int(d) for d in shape)
    cols = shape[-1] if shape else 1
    return (int(np.prod(shape[:-1], dtype=np.int64)) if shape else 1), cols


def _check_gelu(x, bias) -> tuple[int, int]:
    rows, cols = _rows_cols(x.shape)
    if bias is not None and tuple(bias.shape) != (cols,):
        raise ValueError(f"bias must be [{cols}], got {list(bias.shape)}")
    return rows, cols


def _check_swiglu(gate, up) -> tuple[int, int]:
    if tuple(gate.shape) != tuple(up.shape):
        raise ValueError(f"gate {list(gate.shape)} and up {list(up.shape)} must have one shape")
    return _rows_cols(gate.shape)


def bias_gelu_cpu(x, bias=None, *, approximate="none"):
    _check_gelu(x, bias)
    return ref.bias_gelu(x, bias, approximate=approximate).astype(x.dtype)


def swiglu_cpu(gate, up):
    _check_swiglu(gate, up)
    return ref.swiglu(gate, up).astype(gate.dtype)


def first_shape(x, *_, **__):
    return [x.shape]


def bias_gelu_cuda(ctx, x, bias=None, *, out, approximate="none"):
    rows, cols = _check_gelu(x, bias)
    if rows * cols == 0:
        return
    bias_gelu(x.ptr, address(bias), out.ptr, rows, cols, approximate, dtype_name(x.dtype),
              ctx.stream)


def swiglu_cuda(ctx, gate, up, *, out):
    rows, cols = _check_swiglu(gate, up)
    if rows * cols == 0:
        return
    swiglu(gate.ptr, up.ptr, out.ptr, rows, cols, dtype_name(gate.dtype), ctx.stream)


FAMILY = "activations"
declare(FAMILY, "BiasGelu", cpu=bias_gelu_cpu, cuda=bias_gelu_cuda, shape=first_shape)
declare(FAMILY, "SwiGLU", cpu=swiglu_cpu, cuda=swiglu_cuda, shape=first_shape)
