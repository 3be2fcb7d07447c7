"""RotaryFused: rotary position embedding (RoPE) applied to queries or keys.

    Y = X·cos + rotate(X)·sin

``interleaved=0`` (LLaMA, Mistral, GPT-NeoX): ``rotate(x) = concat(-x[..., d/2:],
x[..., :d/2])`` ("rotate half"). ``interleaved=1`` (GPT-J): pairs ``(x[2i],
x[2i+1])`` become ``(-x[2i+1], x[2i])``. ``rotary_dim`` (0: the whole last axis)
rotates only the first ``rotary_dim`` features; the rest pass through.

``cos`` and ``sin`` are whatever tensors the model computed, broadcastable to
the rotated part of X (``[1, 1, S, d]`` for ``X [B, H, S, d]`` in LLaMA); the
fused op does not recompute them from positions.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir.node import Node
from onnxopt.ops.base import FusedOp


def _slice(b, x, start: int, end: int, step: int = 1):
    i64 = lambda v, hint: b.const(np.array([v], np.int64), hint)
    return b.op("Slice", x, i64(start, "start"), i64(end, "end"), i64(-1, "axis"),
                i64(step, "step"))


def _rotate(b, x, d: int, interleaved: bool):
    if not interleaved:
        first, second = _slice(b, x, 0, d // 2), _slice(b, x, d // 2, d)
        return b.op("Concat", b.op("Neg", second), first, axis=-1)
    axis = b.const(np.array([-1], np.int64), "axis")
    even, odd = _slice(b, x, 0, d, 2), _slice(b, x, 1, d, 2)
    pairs = b.op("Concat", b.op("Unsqueeze", b.op("Neg", odd), axis),
                 b.op("Unsqueeze", even, axis), axis=-1)
    rank = x.rank if x.rank is not None else 4
    return b.op("Reshape", pairs, b.const(np.array([0] * (rank - 1) + [-1], np.int64), "shape"))


def decompose(b, node: Node):
    x, cos, sin = node.inputs[:3]
    head = x.shape[-1]
    d = node.attr("rotary_dim", 0) or head
    interleaved = bool(node.attr("interleaved", 0))
    part = x if d == head else _slice(b, x, 0, d)
    if part is not x:
        part.shape = (*x.shape[:-1], d)
    y = b.op("Add", b.op("Mul", part, cos), b.op("Mul", _rotate(b, part, d, interleaved), sin))
    if part is not x:
        y = b.op("Concat", y, _slice(b, x, d, head), axis=-1)
    return [y]


def reference(x, cos, sin, *, interleaved=0, rotary_dim=0, **_):
    """NumPy RoPE in float64, returned in X's dtype."""
    x64 = np.asarray(x, np.float64)
    d = rotary_dim or x64.shape[-1]
    part, rest = x64[..., :d], x64[..., d:]
    if interleaved:
        rot = np.stack([-part[..., 1::2], part[..., 0::2]], axis=-1).reshape(part.shape)
    else:
        rot = np.concatenate([-part[..., d // 2:], part[..., :d // 2]], axis=-1)
    y = part * np.asarray(cos, np.float64) + rot * np.asarray(sin, np.float64)
    return np.concatenate([y, rest], axis=-1).astype(np.asarray(x).dtype)


ROTARY = FusedOp(
    name="RotaryFused",
    inputs=("X", "cos", "sin"),
    outputs=("Y",),
    attrs={"interleaved": 0, "rotary_dim": 0},
    decompose=decompose,
    reference=reference,
    doc=__doc__,
)
