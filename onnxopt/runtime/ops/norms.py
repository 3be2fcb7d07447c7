"""``ai.onnxopt.cuda::LayerNorm``, ``::RMSNorm`` and ``::GroupNorm``: ``kernels/layer_norm.cu``
and ``kernels/group_norm.cu`` as ORT custom ops.

    Y, S? = LayerNorm(X, gamma?, beta?, residual?) <epsilon: float>
    Y, S? = RMSNorm(X, gamma?, residual?)          <epsilon: float>
    Y     = GroupNorm(X, gamma?, beta?)            <groups: int, epsilon: float, activation: str>

Over the last axis of ``v = X + residual`` (``S = v``, rounded to X's dtype, is the optional
second output: the next block's residual). All tensors share one dtype; gamma/beta are
``[hidden]``, residual is shaped like X. Statistics are computed in float32 by the kernel.
The launch wrapper picks the vector width per call from the hidden size and the pointers'
alignment; the node names no specialisation.

GroupNorm takes X [N, C, *spatial] (channels on axis 1), gamma/beta [C], and normalises each of
``groups`` groups of C / groups channels over its channels and positions; ``activation="silu"``
applies SiLU after gamma/beta. The launch wrapper picks the vector width and whether the group
is held in registers or streamed from the group's size.
"""

from __future__ import annotations

import numpy as np

from onnxopt import reference as ref
from onnxopt.runtime.cuda import group_norm, layer_norm, rms_norm

from ._common import address, declare, dtype_name

FAMILY = "layer_norm"
GROUP_FAMILY = "group_norm"


def _check(x_shape, gamma=None, beta=None, residual=None) -> tuple[int, int]:
    """(rows, hidden); raises when an input's shape is not what the kernel assumes."""
    x_shape = tuple(int(d) for d in x_shape)
    if not x_shape:
        raise ValueError("X must have at least one axis")
    hidden = x_shape[-1]
    for name, t in (("gamma", gamma), ("beta", beta)):
        if t is not None and tuple(t.shape) != (hidden,):
            raise ValueError(f"{name} must be [{hidden}], got {list(t.shape)}")
    if residual is not None and tuple(residual.shape) != x_shape:
        raise ValueError(f"residual must be shaped like X {list(x_shape)}, "
                         f"got {list(residual.shape)}")
    rows = int(np.prod(x_shape[:-1], dtype=np.int64))
    return rows, hidden


def _sum(x, residual):
    """X + residual rounded to X's dtype, as the kernel (and the original Add) stores it."""
    if residual is None:
        return np.asarray(x)
    return (np.asarray(x, np.float64) + np.asarray(residual, np.float64)).astype(x.dtype)


def layer_norm_cpu(x, gamma=None, beta=None, residual=None, *, epsilon=1e-5):
    _check(x.shape, gamma, beta, residual)
    v = _sum(x, residual)
    y, _ = ref.layer_norm(v, gamma, beta, eps=epsilon)
    return y.astype(x.dtype), v


def rms_norm_cpu(x, gamma=None, residual=None, *, epsilon=1e-6):
    _check(x.shape, gamma, None, residual)
    v = _sum(x, residual)
    y, _ = ref.rms_norm(v, gamma, eps=epsilon)
    return y.astype(x.dtype), v


def norm_shape(x, *_, **__):
    return [x.shape, x.shape]


def _outputs(out):
    y, s = out if isinstance(out, tuple) else (out, None)
    return y, s


def layer_norm_cuda(ctx, x, gamma=None, beta=None, residual=None, *, out, epsilon=1e-5):
    rows, hidden = _check(x.shape, gamma, beta, residual)
    y, s = _outputs(out)
    if s is not None and residual is None:
        raise ValueError("the sum output S needs a residual input")
    if rows == 0:
        return
    layer_norm(x.ptr, address(gamma), address(beta), y.ptr, rows, hidden, epsilon,
               dtype_name(x.dtype), ctx.stream, residual_ptr=address(residual),
               sum_out_ptr=address(s))


def rms_norm_cuda(ctx, x, gamma=None, residual=None, *, out, epsilon=1e-6):
    rows, hidden = _check(x.shape, gamma, None, residual)
    y, s = _outputs(out)
    if s is not None and residual is None:
        raise ValueError("the sum output S needs a residual input")
    if rows == 0:
        return
    rms_norm(x.ptr, address(gamma), y.ptr, rows, hidden, epsilon, dtype_name(x.dtype),
             ctx.stream, residual_ptr=address(residual), sum_out_ptr=address(s))


declare(FAMILY, "LayerNorm", cpu=layer_norm_cpu, cuda=layer_norm_cuda, shape=norm_shape)
declare(FAMILY, "RMSNorm", cpu=rms_norm_cpu, cuda=rms_norm_cuda, shape=norm_shape)


# --- GroupNorm -------------------------------------------------------------------------------------


def group_dims(x_shape, gamma=None, beta=None, *, groups: int) -> tuple[int, int, int]:
    """(batch, channels, spatial); raises when an input's shape or ``groups`` is not what the
    kernel assumes."""
    x_shape = tuple(int(d) for d in x_shape)
    if len(x_shape) < 2:
        raise ValueError(f"X must be [N, C, ...], got {list(x_shape)}")
    batch, channels = x_shape[:2]
    if groups <= 0 or channels % groups:
        raise ValueError(f"{channels} channels do not split into {groups} groups")
    for name, t in (("gamma", gamma), ("beta", beta)):
        if t is not None and tuple(t.shape) != (channels,):
            raise ValueError(f"{name} must be [{channels}], got {list(t.shape)}")
    return batch, channels, int(np.prod(x_shape[2:], dtype=np.int64))


def group_norm_cpu(x, gamma=None, beta=None, *, groups=1, epsilon=1e-5, activation=""):
    group_dims(x.shape, gamma, beta, groups=groups)
    y = ref.group_norm(x, gamma, beta, groups=groups, eps=epsilon, activation=activation)
    return y.astype(x.dtype)


def group_norm_shape(x, *_, **__):
    return [x.shape]


def group_norm_cuda(ctx, x, gamma=None, beta=None, *, out, groups=1, epsilon=1e-5,
                    activation=""):
    batch, channels, spatial = group_dims(x.shape, gamma, beta, groups=groups)
    if batch == 0 or spatial == 0:
        return
    group_norm(x.ptr, address(gamma), address(beta), out.ptr, batch, channels, spatial, groups,
               epsilon, activation, dtype_name(x.dtype), ctx.stream)


declare(GROUP_FAMILY, "GroupNorm", cpu=group_norm_cpu, cuda=group_norm_cuda,
        shape=group_norm_shape)
