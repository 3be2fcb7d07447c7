"""RotaryFused on ONNX Runtime's rotary operators.

Both ``com.microsoft.RotaryEmbedding`` and ONNX ``RotaryEmbedding`` (opset 23) read cos/sin
caches of half the rotary width, one value per frequency (``[max_position, d/2]`` indexed by
position ids), and rebuild the full width by repeating the halves. ``RotaryFused`` carries the
full-width cos/sin tensors the model computed (``[1, 1, S, d]`` in LLaMA); they equal a
repeated half when the model built them as ``cos(concat(f, f))`` — which
:func:`equal_halves` proves by walking their producers (every Hugging Face "rotate half"
model does it so).

Where proved, the contrib op runs on the model's own tensors: the caches are the first
halves of cos/sin expanded to ``[B, 1, S, d]`` and flattened to ``[B·S, d/2]`` rows, and the
position ids are ``0 … B·S-1`` in ``[B, S]``, so row ``b·S + s`` is batch ``b``'s position
``s`` — whatever positions the model computed (a cache's offset, left padding), nothing is
recomputed. Interleaved pairs (their caches repeat each value twice, not a half) and partial
rotation are left to the decomposition; the ONNX op needs opset 23.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.legality.target import Target
from onnxopt.ops import RotaryAttrs
from onnxopt.refusal import Refusal, refusal
from onnxopt.select._emit import i64
from onnxopt.select.kernel import BOTH_PROVIDERS, MS_DOMAIN, Backend, Kernel

_HALVES = ("reads half-width cos/sin caches (one value per frequency); the node's full-width "
           "cos/sin are not proved to be two equal halves")
# Ops between the Concat of the halves and the node that keep each half equal to the other:
# elementwise on one tensor, or adding a leading axis.
_KEEP_HALVES = frozenset({"Cos", "Sin", "Cast", "Identity", "Unsqueeze", "Neg"})


def equal_halves(value: Value | None, steps: int = 12) -> bool:
    """Whether ``value``'s last axis is two equal halves: produced, through ops that keep that
    (``_KEEP_HALVES``, or a Mul/Div by a one-element constant), by a ``Concat`` of one value
    with itself on the last axis, or a constant whose halves are equal."""
    for _ in range(steps):
        if value is None:
            return False
        producer = value.producer
        if producer is None:
            if value.const is None:
                return False
            array = np.asarray(value.const.numpy())
            half = array.shape[-1] // 2 if array.ndim else 0
            return bool(half and array.shape[-1] % 2 == 0
                        and np.array_equal(array[..., :half], array[..., half:]))
        if producer.op_type == "Concat":
            first, *rest = producer.inputs
            rank = first.rank if first is not None else None
            return (len(rest) == 1 and rest[0] is first and rank is not None
                    and producer.attr("axis", 0) in (-1, rank - 1))
        if producer.op_type in _KEEP_HALVES:
            value = producer.inputs[0]
        elif producer.op_type in ("Mul", "Div") and len(producer.inputs) == 2:
            a, b = producer.inputs
            if _one_element_const(b):
                value = a
            elif producer.op_type == "Mul" and _one_element_const(a):
                value = b
            else:
                return False
        else:
            return False
    return False


def _one_element_const(v: Value | None) -> bool:
    return v is not None and v.const is not None and int(np.prod(v.const.shape or ())) == 1


def _contrib_requires(node: Node, attrs: RotaryAttrs, target: Target) -> Refusal | None:
    x, cos, sin = node.inputs[:3]
    if attrs.interleaved:
        return refusal("interleaved_rotary", "reads caches of one value per pair; the node "
                       "rotates interleaved pairs, whose cos/sin repeat each value, not a half")
    if x.rank != 4 or x.shape is None or not isinstance(x.shape[-1], int) or x.shape[-1] % 2:
        return refusal("not_bnsh", "needs X as [B, H, S, d] with a fixed, even d")
    head = x.shape[-1]
    if attrs.rotary_dim not in (0, head):
        return refusal("partial_rotary", f"rotates {attrs.rotary_dim} of {head} features; "
                       "only a whole head is emitted")
    for c in (cos, sin):
        shape = c.shape
        if (c.rank != 4 or shape is None or shape[1] != 1 or shape[-1] != head
                or not sd.same(shape[-2], x.shape[-2])
                or not (shape[0] == 1 or sd.same(shape[0], x.shape[0]))):
            return refusal("cache_shape", f"needs cos/sin as [1 or B, 1, S, {head}] beside X "
                           f"{list(x.shape)}; {c.name} is {list(shape or ())}", c.name)
        if c.dtype != x.dtype:
            return refusal("cache_dtype", f"needs cos/sin of X's dtype {x.dtype}", c.name)
    if not (equal_halves(cos) and equal_halves(sin)):
        return refusal("half_width_caches", _HALVES)
    return None


def _emit_contrib(b, node: Node, attrs: RotaryAttrs, target: Target) -> list:
    x, cos, sin = node.inputs[:3]
    head = x.shape[-1]
    shape = b.op("Shape", x)
    batch = b.op("Slice", shape, i64(b, [0], "zero"), i64(b, [1], "one"))
    seq = b.op("Slice", shape, i64(b, [2], "two"), i64(b, [3], "three"))
    full = b.op("Concat", batch, i64(b, [1], "one"), seq, i64(b, [head], "head"), axis=0)
    rows = i64(b, [-1, head // 2], "cache_rows")
    caches = [b.op("Reshape", b.op("Slice", b.op("Expand", c, full), i64(b, [0], "zero"),
                                   i64(b, [head // 2], "half"), i64(b, [-1], "last")), rows)
              for c in (cos, sin)]
    count = b.op("Reshape", b.op("Mul", batch, seq), i64(b, [], "scalar"))
    positions = b.op("Reshape", b.op("Range", b.const(np.array(0, np.int64), "first"), count,
                                     b.const(np.array(1, np.int64), "step")),
                     b.op("Concat", batch, seq, axis=0))
    y = b.op("RotaryEmbedding", x, positions, *caches, domain=MS_DOMAIN, interleaved=0)
    y.dtype, y.shape = x.dtype, x.shape
    return [y]


def _onnx23_requires(node: Node, attrs: RotaryAttrs, target: Target) -> Refusal | None:
    return refusal("half_width_caches", _HALVES)


def _never(b, node, attrs, target):  # pragma: no cover - never legal, so never emitted
    raise AssertionError("this kernel is never selected")


def kernels() -> list[Kernel]:
    return [
        Kernel(name="ort.RotaryEmbedding", implements="RotaryFused", backend=Backend.ORT,
               emit=_emit_contrib, min_opset=13,
               dtypes=frozenset({"float32", "float16"}), providers=BOTH_PROVIDERS,
               opsets={MS_DOMAIN: 1}, requires=_contrib_requires,
               notes="com.microsoft; cos/sin proved to be two equal halves, the model's own "
                     "rows as the caches"),
        Kernel(name="onnx.RotaryEmbedding-23", implements="RotaryFused", backend=Backend.ORT,
               emit=_never, dtypes=frozenset({"float32", "float16"}), providers=BOTH_PROVIDERS,
               min_opset=23, min_ort=(1, 23), requires=_onnx23_requires, notes="ONNX"),
    ]
