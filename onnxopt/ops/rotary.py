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

from dataclasses import dataclass

import numpy as np

from onnxopt import reference as ref
from onnxopt.ir.node import Node
from onnxopt.ops.base import FusedAttrs, FusedOp, Port


@dataclass(frozen=True, kw_only=True)
class RotaryAttrs(FusedAttrs):
    """``RotaryFused``'s attributes: pairs interleaved (GPT-J) or halves (LLaMA), and how many
    leading features rotate (0: all)."""

    interleaved: bool = False
    rotary_dim: int = 0


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
    attrs = RotaryAttrs.of(node)
    x, cos, sin = node.inputs[:3]
    head = x.shape[-1]
    d = attrs.rotary_dim or head
    interleaved = attrs.interleaved
    part = x if d == head else _slice(b, x, 0, d)
    if part is not x:
        part.shape = (*x.shape[:-1], d)
    y = b.op("Add", b.op("Mul", part, cos), b.op("Mul", _rotate(b, part, d, interleaved), sin))
    if part is not x:
        y = b.op("Concat", y, _slice(b, x, d, head), axis=-1)
    return [y]


def reference(x, cos, sin, **attributes):
    """RotaryFused on arrays (attributes as keywords), in X's dtype."""
    attrs = RotaryAttrs.from_attributes(attributes)
    y = ref.rotary(x, cos, sin, interleaved=attrs.interleaved, rotary_dim=attrs.rotary_dim)
    return y.astype(np.asarray(x).dtype)


ROTARY = FusedOp(
    name="RotaryFused",
    inputs=(Port("X"), Port("cos"), Port("sin")),
    outputs=(Port("Y"),),
    attrs=RotaryAttrs,
    decompose=decompose,
    reference=reference,
    doc=__doc__,
)
