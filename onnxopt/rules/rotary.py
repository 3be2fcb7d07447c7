"""x·cos + concat(-x[..., d/2:], x[..., :d/2])·sin  ->  ai.onnxopt.RotaryFused(x, cos, sin)

Rotary position embedding as LLaMA and Mistral apply it to queries and keys
(``apply_rotary_pos_emb`` with ``rotate_half``); both PyTorch exporters spell
it ``Slice``/``Slice``/``Neg``/``Concat``/``Mul``/``Mul``/``Add``. ``cos`` and
``sin`` are what the model computed (``Unsqueeze(Cos(...))``, shared by every
layer), taken as inputs as long as they broadcast to x without enlarging it.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.ir.node import Node
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops import RotaryAttrs
from onnxopt.refusal import Refusal
from onnxopt.rules.base import Rule

INT64_MAX = 2**63 - 1


class Rotary(Rule):
    """x·cos + rotate_half(x)·sin  ->  ai.onnxopt.RotaryFused(x, cos, sin)"""

    name = "rotary"
    root = "Add"

    def pattern(self, p: Builder):
        x = p.var("x", dtype=FLOAT_TYPES)
        # (the halves' bounds are Slice's other inputs, checked in legal)
        rotated = p.Concat(p.Neg(p.Slice(x, name="second_half", other_inputs=True)),
                           p.Slice(x, name="first_half", other_inputs=True),
                           name="concat", reads=("axis",))
        # The rotated term first: it pins x, so the commuted Mul(x, cos) cannot bind x to cos.
        return p.Add(p.Mul(rotated, p.var("sin")), p.Mul(x, p.var("cos")))

    def legal(self, m: Match, target) -> Refusal | None:
        x = m.x
        if not x.shape or not isinstance(x.shape[-1], int):
            return Refusal("head_size_unknown", f"%{x.name}: the head size is not known",
                           f"%{x.name}")
        d, rank = x.shape[-1], len(x.shape)
        if d % 2:
            return Refusal("head_size_odd", f"%{x.name}: the head size {d} is odd, so it has "
                           "no halves to rotate", f"%{x.name}")
        axis = m.concat.attr("axis")
        if axis not in (-1, rank - 1):
            return Refusal("not_last_axis", f"{m.concat.name}: concatenates on axis {axis}, "
                           "not the last axis", m.concat.name)
        for node, want in ((m.first_half, (0, d // 2)), (m.second_half, (d // 2, d))):
            if reason := _half(node, want, d, rank):
                return reason
        return self._tables_legal(m)

    def _tables_legal(self, m: Match) -> Refusal | None:
        x, cos, sin = m.x, m.cos, m.sin
        for t in (cos, sin):
            at = f"%{t.name}"
            if t.dtype != x.dtype:
                return Refusal("table_dtype", f"{at}: the rotary table is {t.dtype}, x is "
                               f"{x.dtype}", at)
            if t.shape is None:
                return Refusal("table_shape_unknown",
                               f"{at}: the shape of the rotary table is unknown", at)
            full = sd.broadcast_shapes(t.shape, x.shape)
            if len(t.shape) > len(x.shape) or full is None or not all(
                    sd.same(a, b) for a, b in zip(full, x.shape)):
                return Refusal("table_not_broadcast", f"{at}: a rotary table of shape "
                               f"{list(t.shape)} does not broadcast to x {list(x.shape)}", at)
            if t.shape[-1] != x.shape[-1]:
                return Refusal("table_features", f"{at}: the rotary table has {t.shape[-1]} "
                               f"features, x has {x.shape[-1]}", at)
        if cos.shape != sin.shape:
            return Refusal("table_shapes_differ", f"%{sin.name}: sin has shape "
                           f"{list(sin.shape)}, cos {list(cos.shape)}", f"%{sin.name}")
        return None

    def rewrite(self, b: NodeBuilder, m: Match, facts):
        return b.fused("RotaryFused", m.x, m.cos, m.sin, attrs=RotaryAttrs())

    def describe(self, m: Match, facts) -> str:
        return f"rotate-half, head size {m.x.shape[-1]}"


def _ints(node: Node, index: int) -> list[int] | None:
    v = node.input(index)
    if v is None or v.const is None:
        return None
    return [int(a) for a in np.asarray(v.const.numpy()).reshape(-1)]


def _half(node: Node, want: tuple[int, int], d: int, rank: int) -> Refusal | None:
    """``node`` slices exactly ``[want[0]:want[1]]`` of the last axis, with step 1."""
    starts, ends = _ints(node, 1), _ints(node, 2)
    axes = _ints(node, 3) if node.input(3) is not None else list(range(len(starts or [])))
    steps = _ints(node, 4) if node.input(4) is not None else [1] * len(starts or [])
    if None in (starts, ends, axes, steps) or not (len(starts) == len(ends) == len(axes) == 1):
        return Refusal("slice_bounds_unknown", f"{node.name}: the slice bounds are not "
                       "constants over one axis", node.name)
    axis = axes[0] + rank if axes[0] < 0 else axes[0]
    start = starts[0] + d if starts[0] < 0 else starts[0]
    end = min(ends[0] + d if ends[0] < 0 else ends[0], d)
    if axis != rank - 1 or steps != [1] or (start, end) != want:
        where = f"axis {axes[0]}" if axis != rank - 1 else "the last axis"
        step = f" with step {steps[0]}" if steps != [1] else ""
        return Refusal("slice_not_half", f"{node.name}: takes [{start}:{end}]{step} of "
                       f"{where}, not the half [{want[0]}:{want[1]}] of the last axis",
                       node.name)
    return None
