"""A generator of random *valid* ONNX graphs, for the fuzzer.

Why: mutants of a handful of seeds explore near those seeds; generated graphs
reach combinations nobody exported — opsets 7 to 26 in their own spellings (axes
as attributes before opset 13, Slice attributes before 10, Pad and Clip
attributes before 11...), symbolic dims, control flow capturing outer values,
local functions in a custom domain, ai.onnx.ml ops, and small attention-,
LayerNorm-, RMSNorm-, GELU- and SwiGLU-like blocks so that the fusion rules fire
on graphs they were never tuned on.

Graphs are shape-consistent by construction: every value carries its dtype and
shape (ints, or symbol names for dynamic dims), and each op builder only picks
operands it can use. :func:`generate` keeps a graph only if it passes
``onnx.checker.check_model(full_check=True)`` and runs in ONNX Runtime; a seed
always gives the same graph.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

Dim = int | str
Shape = tuple[Dim, ...]
FLOAT = TensorProto.FLOAT
MIN_OPSET, MAX_OPSET = 7, 26
SYMBOLS = (("N", "S"), ("batch", "seq"), ("b", "t"))


@dataclass
class Val:
    name: str
    dtype: int
    shape: Shape

    @property
    def rank(self) -> int:
        return len(self.shape)

    def static(self, axis: int) -> bool:
        return isinstance(self.shape[axis], int)


@dataclass
class Builder:
    """Accumulates nodes, initializers and inputs of one graph at one opset."""

    rng: random.Random
    opset: int
    nodes: list[NodeProto] = field(default_factory=list)
    inits: list[TensorProto] = field(default_factory=list)
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    vals: list[Val] = field(default_factory=list)
    functions: list[onnx.FunctionProto] = field(default_factory=list)
    domains: dict[str, int] = field(default_factory=dict)
    used: list[str] = field(default_factory=list)
    counter: int = 0

    def fresh(self, base: str = "v") -> str:
        self.counter += 1
        return f"{base}{self.counter}"

    def node(self, op: str, inputs: list[str], outputs: int = 1, domain: str = "",
             **attrs: object) -> list[str]:
        names = [self.fresh() for _ in range(outputs)]
        name = self.fresh(f"{op}_") if self.rng.random() < 0.8 else ""
        self.nodes.append(helper.make_node(op, inputs, names, name=name, domain=domain,
                                           **attrs))
        self.used.append(op)
        return names

    def const(self, array: np.ndarray, base: str = "c") -> str:
        """An initializer, or now and then a Constant node."""
        name = self.fresh(base)
        tensor = numpy_helper.from_array(array, name)
        if self.rng.random() < 0.15 and (self.opset >= 9 or array.dtype == np.float32):
            self.nodes.append(helper.make_node("Constant", [], [name], value=tensor))
        else:
            self.inits.append(tensor)
        return name

    def ints(self, values: list[int]) -> str:
        return self.const(np.array(values, np.int64), "i")

    def weight(self, *shape: int, scale: float = 0.5) -> str:
        data = np.array([self.rng.gauss(0, scale) for _ in range(math.prod(shape))], np.float32)
        return self.const(data.reshape(shape), "w")

    def add(self, name: str, dtype: int, shape: Shape) -> Val:
        val = Val(name, dtype, tuple(shape))
        self.vals.append(val)
        return val

    def float_vals(self, pred: Callable[[Val], bool] = lambda v: True) -> list[Val]:
        return [v for v in self.vals if v.dtype == FLOAT and pred(v)]

    # -- opset-dependent spellings -------------------------------------------------------

    def unsqueeze(self, x: str, axes: list[int]) -> str:
        if self.opset >= 13:
            return self.node("Unsqueeze", [x, self.ints(axes)])[0]
        return self.node("Unsqueeze", [x], axes=axes)[0]

    def squeeze(self, x: str, axes: list[int]) -> str:
        if self.opset >= 13:
            return self.node("Squeeze", [x, self.ints(axes)])[0]
        return self.node("Squeeze", [x], axes=axes)[0]

    def reduce(self, op: str, x: str, axes: list[int], keepdims: int) -> str:
        as_input = self.opset >= (13 if op == "ReduceSum" else 18)
        if as_input:
            return self.node(op, [x, self.ints(axes)], keepdims=keepdims)[0]
        return self.node(op, [x], axes=axes, keepdims=keepdims)[0]

    def slice(self, x: str, starts: list[int], ends: list[int], axes: list[int],
              steps: list[int] | None) -> str:
        if self.opset < 10:
            return self.node("Slice", [x], starts=starts, ends=ends, axes=axes)[0]
        ins = [x, self.ints(starts), self.ints(ends), self.ints(axes)]
        if steps:
            ins.append(self.ints(steps))
        return self.node("Slice", ins)[0]


def norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def broadcast_const_shape(rng: random.Random, shape: Shape) -> tuple[int, ...]:
    """A constant shape that broadcasts to ``shape``: a suffix with some dims set to 1."""
    keep = rng.randint(0, len(shape))
    suffix = shape[len(shape) - keep:]
    return tuple(d if isinstance(d, int) and rng.random() < 0.7 else 1 for d in suffix)


# ----------------------------------------------------------------------------- op builders
# Each takes the builder and returns the Val it made, or None if it does not apply.


def op_unary(b: Builder) -> Val | None:
    x = b.rng.choice(b.float_vals())
    table: list[tuple[str, int, dict]] = [
        ("Relu", 1, {}), ("Sigmoid", 1, {}), ("Tanh", 1, {}), ("Abs", 1, {}), ("Neg", 1, {}),
        ("Softplus", 1, {}), ("LeakyRelu", 1, {"alpha": 0.1}), ("Elu", 1, {}),
        ("HardSigmoid", 6, {}), ("Erf", 9, {}), ("Identity", 1, {}), ("Sin", 7, {}),
        ("Floor", 6, {}), ("Sign", 9, {}), ("Selu", 6, {}), ("Gelu", 20, {}),
        ("Mish", 18, {}), ("HardSwish", 14, {}), ("Celu", 12, {}),
    ]
    op, _, attrs = b.rng.choice([t for t in table if t[1] <= b.opset])
    out = b.node(op, [x.name], **attrs)[0]
    if b.rng.random() < 0.2:
        pos = b.node("Abs", [out])[0]
        out = b.node(b.rng.choice(["Sqrt", "Log", "Exp"]),
                     [b.node("Add", [pos, b.const(np.array(1.0, np.float32))])[0]])[0]
    return b.add(out, FLOAT, x.shape)


def op_binary(b: Builder) -> Val | None:
    x = b.rng.choice(b.float_vals())
    same = b.float_vals(lambda v: v.shape == x.shape and v is not x)
    if same and b.rng.random() < 0.5:
        other, shape = b.rng.choice(same).name, x.shape
    else:
        cshape = broadcast_const_shape(b.rng, x.shape)
        other = b.const(np.array(np.random.default_rng(b.rng.getrandbits(32)).uniform(
            0.5, 1.5, cshape), np.float32))
        shape = x.shape
    op = b.rng.choice(["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
    if op == "Pow":
        other = b.const(np.array(b.rng.choice([2.0, 3.0, 0.5]), np.float32))
        if b.opset < 7:
            return None
        base = b.node("Abs", [x.name])[0] if b.rng.random() < 0.5 else x.name
        return b.add(b.node("Pow", [base, other])[0], FLOAT, shape)
    if op == "Div":
        other = b.node("Add", [b.node("Abs", [other])[0],
                               b.const(np.array(1.0, np.float32))])[0]
    if op in ("Max", "Min") and b.opset < 8 and not (same and other in {v.name for v in same}):
        return None
    operands = [x.name, other] if b.rng.random() < 0.7 else [other, x.name]
    return b.add(b.node(op, operands)[0], FLOAT, shape)


def op_matmul(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank >= 1 and v.static(-1) and v.shape[-1] <= 64)
    if not cands:
        return None
    x = b.rng.choice(cands)
    k, m = x.shape[-1], b.rng.choice([1, 2, 4, 8, 16])
    w = b.weight(k, m, scale=1 / math.sqrt(k))
    out = b.node("MatMul", [x.name, w] if x.rank >= 1 else [w, x.name])[0]
    if x.rank == 1:
        return b.add(out, FLOAT, (m,))
    return b.add(out, FLOAT, x.shape[:-1] + (m,))


def op_batched_matmul(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank >= 2 and v.static(-1) and v.static(-2))
    if not cands:
        return None
    x = b.rng.choice(cands)
    perm = list(range(x.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    xt = b.node("Transpose", [x.name], perm=perm)[0]
    out = b.node("MatMul", [x.name, xt])[0]
    return b.add(out, FLOAT, x.shape[:-1] + (x.shape[-2],))


def op_gemm(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank == 2 and v.static(1))
    if not cands:
        return None
    x = b.rng.choice(cands)
    k, n = x.shape[1], b.rng.choice([2, 3, 4, 8])
    trans_b = b.rng.randint(0, 1)
    w = b.weight(*((n, k) if trans_b else (k, n)))
    c = b.weight(*b.rng.choice([(n,), (1, n)]))
    attrs = {"transB": trans_b, "alpha": b.rng.choice([1.0, 0.5]), "beta": 1.0}
    return b.add(b.node("Gemm", [x.name, w, c], **attrs)[0], FLOAT, (x.shape[0], n))


def op_reshape(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank >= 1)
    if not cands:
        return None
    x = b.rng.choice(cands)
    lead = 0
    while lead < x.rank and not isinstance(x.shape[lead], int):
        lead += 1
    if any(not isinstance(d, int) for d in x.shape[lead:]):
        return None
    total = math.prod(x.shape[lead:])
    target = factorize(b.rng, total)
    spec = [0] * lead + target
    if b.rng.random() < 0.3:
        spec[lead + b.rng.randrange(len(target))] = -1
    out = b.node("Reshape", [x.name, b.ints(spec)])[0]
    return b.add(out, FLOAT, x.shape[:lead] + tuple(target))


def factorize(rng: random.Random, total: int) -> list[int]:
    dims, rest = [], total
    for _ in range(rng.randint(0, 3)):
        divisors = [d for d in range(2, rest + 1) if rest % d == 0]
        if not divisors:
            break
        d = rng.choice(divisors)
        dims.append(d)
        rest //= d
    dims.append(rest)
    if rng.random() < 0.2:
        dims.insert(rng.randrange(len(dims) + 1), 1)
    return dims


def op_transpose(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank >= 2)
    if not cands:
        return None
    x = b.rng.choice(cands)
    perm = list(range(x.rank))
    b.rng.shuffle(perm)
    attrs = {"perm": perm} if b.rng.random() < 0.9 else {}
    if not attrs:  # no perm: the dims reversed
        perm = list(range(x.rank))[::-1]
    out = b.node("Transpose", [x.name], **attrs)[0]
    return b.add(out, FLOAT, tuple(x.shape[p] for p in perm))


def op_concat(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank >= 1 and any(v.static(i) for i in range(v.rank)))
    if not cands:
        return None
    x = b.rng.choice(cands)
    axis = b.rng.choice([i for i in range(x.rank) if x.static(i)])
    y = b.rng.choice(b.float_vals(lambda v: v.shape == x.shape))
    shape = list(x.shape)
    shape[axis] *= 2
    written = axis - x.rank if b.rng.random() < 0.3 and b.opset >= 11 else axis
    return b.add(b.node("Concat", [x.name, y.name], axis=written)[0], FLOAT, tuple(shape))


def op_slice(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: any(v.static(i) and v.shape[i] >= 2 for i in range(v.rank)))
    if not cands:
        return None
    x = b.rng.choice(cands)
    axis = b.rng.choice([i for i in range(x.rank) if x.static(i) and x.shape[i] >= 2])
    size = x.shape[axis]
    start = b.rng.randrange(size)
    end = b.rng.randint(start + 1, size)
    step = b.rng.choice([1, 1, 2]) if b.opset >= 10 else 1
    length = len(range(start, end, step))
    end_spec = end if b.rng.random() < 0.8 or end < size else 2**62
    written = axis - x.rank if b.rng.random() < 0.3 else axis
    out = b.slice(x.name, [start], [end_spec], [written], [step] if step != 1 else None)
    shape = list(x.shape)
    shape[axis] = length
    return b.add(out, FLOAT, tuple(shape))


def op_gather(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: any(v.static(i) for i in range(v.rank)))
    if not cands:
        return None
    x = b.rng.choice(cands)
    axis = b.rng.choice([i for i in range(x.rank) if x.static(i)])
    size = x.shape[axis]
    if b.rng.random() < 0.4:
        idx = b.const(np.array(b.rng.randrange(-size, size), np.int64), "idx")
        ishape: tuple[int, ...] = ()
    else:
        count = b.rng.randint(1, 4)
        idx = b.const(np.array([b.rng.randrange(size) for _ in range(count)], np.int64), "idx")
        ishape = (count,)
    out = b.node("Gather", [x.name, idx], axis=axis)[0]
    return b.add(out, FLOAT, x.shape[:axis] + ishape + x.shape[axis + 1:])


def op_unsqueeze(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank <= 4)
    if not cands:
        return None
    x = b.rng.choice(cands)
    pos = b.rng.randint(0, x.rank)
    written = pos - (x.rank + 1) if b.opset >= 11 and b.rng.random() < 0.3 else pos
    out = b.unsqueeze(x.name, [written])
    return b.add(out, FLOAT, x.shape[:pos] + (1,) + x.shape[pos:])


def op_squeeze(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: 1 in v.shape)
    if not cands:
        return None
    x = b.rng.choice(cands)
    axis = b.rng.choice([i for i, d in enumerate(x.shape) if d == 1])
    out = b.squeeze(x.name, [axis])
    return b.add(out, FLOAT, x.shape[:axis] + x.shape[axis + 1:])


def op_reduce(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank >= 1)
    if not cands:
        return None
    x = b.rng.choice(cands)
    op = b.rng.choice(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2",
                       "ReduceLogSumExp", "ReduceSumSquare"])
    axes = sorted(b.rng.sample(range(x.rank), b.rng.randint(1, x.rank)))
    keepdims = b.rng.randint(0, 1)
    written = [a - x.rank if b.opset >= 11 and b.rng.random() < 0.3 else a for a in axes]
    out = b.reduce(op, x.name, written, keepdims)
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keepdims else tuple(
        d for i, d in enumerate(x.shape) if i not in axes)
    return b.add(out, FLOAT, shape)


def op_softmax(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank >= 1)
    if not cands:
        return None
    x = b.rng.choice(cands)
    op = b.rng.choice(["Softmax", "Softmax", "LogSoftmax"])
    axis = -1 if b.opset < 13 or b.rng.random() < 0.6 else b.rng.randrange(-x.rank, x.rank)
    if b.opset < 13:
        axis = x.rank - 1 if b.rng.random() < 0.5 else -1
    return b.add(b.node(op, [x.name], axis=axis)[0], FLOAT, x.shape)


def op_conv(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank == 4 and all(v.static(i) for i in (1, 2, 3))
                         and v.shape[2] >= 3 and v.shape[3] >= 3 and v.shape[1] <= 16)
    if not cands:
        return None
    x = b.rng.choice(cands)
    n, c, h, w = x.shape
    kind = b.rng.choice(["Conv", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool",
                         "BatchNormalization"])
    if kind == "GlobalAveragePool":
        return b.add(b.node(kind, [x.name])[0], FLOAT, (n, c, 1, 1))
    if kind == "BatchNormalization":
        ins = [x.name, b.weight(c), b.weight(c),
               b.const(np.zeros(c, np.float32)), b.const(np.ones(c, np.float32))]
        return b.add(b.node(kind, ins, epsilon=1e-5)[0], FLOAT, x.shape)
    k = b.rng.choice([1, 2, 3])
    stride = b.rng.choice([1, 1, 2])
    pad = b.rng.choice([0, k // 2])
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4}
    if kind == "Conv":
        group = b.rng.choice([g for g in (1, 2, c) if c % g == 0])
        m = group * b.rng.choice([1, 2])
        ins = [x.name, b.weight(m, c // group, k, k)]
        if b.rng.random() < 0.6:
            ins.append(b.weight(m))
        return b.add(b.node("Conv", ins, group=group, **attrs)[0], FLOAT, (n, m, oh, ow))
    return b.add(b.node(kind, [x.name], **attrs)[0], FLOAT, (n, c, oh, ow))


def op_cast(b: Builder) -> Val | None:
    x = b.rng.choice(b.float_vals())
    mid = b.rng.choice([TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT64,
                        TensorProto.INT32])
    if mid == TensorProto.INT64 and b.rng.random() < 0.5:
        scaled = b.node("Mul", [x.name, b.const(np.array(4.0, np.float32))])[0]
        x = Val(scaled, FLOAT, x.shape)
    down = b.node("Cast", [x.name], to=mid)[0]
    if mid == TensorProto.INT64 and b.rng.random() < 0.5:
        b.add(down, TensorProto.INT64, x.shape)
    return b.add(b.node("Cast", [down], to=FLOAT)[0], FLOAT, x.shape)


def op_where(b: Builder) -> Val | None:
    if b.opset < 9:
        return None
    x = b.rng.choice(b.float_vals())
    cond = b.node(b.rng.choice(["Greater", "Less"]), [x.name, b.const(np.array(0.0,
                                                                           np.float32))])[0]
    if b.rng.random() < 0.5:
        cond = b.node("Not", [cond])[0]
    other = b.const(np.array(b.rng.choice([0.0, -1e4, 1.0]), np.float32))
    ins = [cond, x.name, other] if b.rng.random() < 0.5 else [cond, other, x.name]
    return b.add(b.node("Where", ins)[0], FLOAT, x.shape)


def op_expand_tile(b: Builder) -> Val | None:
    cands = b.float_vals(lambda v: v.rank <= 3)
    if not cands:
        return None
    x = b.rng.choice(cands)
    if b.opset >= 8 and b.rng.random() < 0.5:
        target = (2,) + tuple(d if isinstance(d, int) else 1 for d in x.shape)
        out = b.node("Expand", [x.name, b.ints(list(target))])[0]
        return b.add(out, FLOAT, (2,) + x.shape)
    if not all(isinstance(d, int) for d in x.shape):
        return None
    reps = [b.rng.choice([1, 2]) for _ in x.shape]
    out = b.node("Tile", [x.name, b.ints(reps)])[0]
    return b.add(out, FLOAT, tuple(d * r for d, r in zip(x.shape, reps)))


def op_pad_clip(b: Builder) -> Val | None:
    x = b.rng.choice(b.float_vals())
    if b.rng.random() < 0.5:
        lo, hi = -0.5, b.rng.choice([0.5, 6.0])
        if b.opset < 11:
            out = b.node("Clip", [x.name], min=lo, max=hi)[0]
        else:
            out = b.node("Clip", [x.name, b.const(np.array(lo, np.float32)),
                                  b.const(np.array(hi, np.float32))])[0]
        return b.add(out, FLOAT, x.shape)
    if x.rank == 0 or not x.static(x.rank - 1):
        return None
    pads = [0] * (2 * x.rank)
    pads[x.rank - 1], pads[2 * x.rank - 1] = b.rng.randint(0, 2), b.rng.randint(0, 2)
    if b.opset < 11:
        out = b.node("Pad", [x.name], pads=pads, mode="constant", value=0.0)[0]
    else:
        out = b.node("Pad", [x.name, b.ints(pads)], mode="constant")[0]
    shape = list(x.shape)
    shape[-1] += pads[x.rank - 1] + pads[2 * x.rank - 1]
    return b.add(out, FLOAT, tuple(shape))


def op_shape_arith(b: Builder) -> Val | None:
    """Reshape to a computed shape: Concat(Shape(x)[:-2], [-1]) — flatten the last two dims."""
    cands = b.float_vals(lambda v: v.rank >= 3)
    if not cands or b.opset < 10:
        return None
    x = b.rng.choice(cands)
    shp = b.node("Shape", [x.name])[0]
    head = b.slice(shp, [0], [x.rank - 2], [0], None)
    new = b.node("Concat", [head, b.ints([-1])], axis=0)[0]
    out = b.node("Reshape", [x.name, new])[0]
    last = x.shape[-1] * x.shape[-2] if x.static(-1) and x.static(-2) else None
    if last is None:
        return None
    return b.add(out, FLOAT, x.shape[:-2] + (last,))


def op_einsum_trilu_cumsum(b: Builder) -> Val | None:
    x = b.rng.choice(b.float_vals())
    choice = b.rng.randrange(3)
    if choice == 0 and b.opset >= 12 and x.rank >= 2 and x.static(-1):
        k = x.shape[-1]
        w = b.weight(k, 3)
        out = b.node("Einsum", [x.name, w], equation="...ij,jk->...ik")[0]
        return b.add(out, FLOAT, x.shape[:-1] + (3,))
    if choice == 1 and b.opset >= 14 and x.rank >= 2:
        return b.add(b.node("Trilu", [x.name], upper=b.rng.randint(0, 1))[0], FLOAT, x.shape)
    if choice == 2 and b.opset >= 11 and x.rank >= 1:
        axis = b.const(np.array(b.rng.randrange(x.rank), np.int64))
        return b.add(b.node("CumSum", [x.name, axis])[0], FLOAT, x.shape)
    return None


def op_noop(b: Builder) -> Val | None:
    """Ops that do nothing (x+0, x*1, Identity, Dropout, a Reshape to the same shape)."""
    x = b.rng.choice(b.float_vals())
    kind = b.rng.randrange(4)
    if kind == 0:
        out = b.node("Add", [x.name, b.const(np.array(0.0, np.float32))])[0]
    elif kind == 1:
        out = b.node("Mul", [x.name, b.const(np.ones((1,), np.float32))])[0]
    elif kind == 2:
        out = b.node("Dropout", [x.name])[0]
    else:
        if any(not isinstance(d, int) for d in x.shape):
            return None
        out = b.node("Reshape", [x.name, b.ints(list(x.shape))])[0]
    return b.add(out, FLOAT, x.shape)


# ----------------------------------------------------------------------------- blocks


def last_dim_vals(b: Builder, lo: int = 2, hi: int = 64) -> list[Val]:
    return b.float_vals(lambda v: v.rank >= 2 and v.static(-1) and lo <= v.shape[-1] <= hi)


def op_layernorm(b: Builder) -> Val | None:
    cands = last_dim_vals(b)
    if not cands:
        return None
    x = b.rng.choice(cands)
    h = x.shape[-1]
    gamma, beta = b.weight(h, scale=0.2), b.weight(h, scale=0.2)
    if b.opset >= 17 and b.rng.random() < 0.3:
        out = b.node("LayerNormalization", [x.name, gamma, beta], axis=-1, epsilon=1e-5)[0]
        return b.add(out, FLOAT, x.shape)
    mu = b.reduce("ReduceMean", x.name, [-1], 1)
    xc = b.node("Sub", [x.name, mu])[0]
    if b.rng.random() < 0.5:
        sq = b.node("Pow", [xc, b.const(np.array(2.0, np.float32))])[0]
    else:
        sq = b.node("Mul", [xc, xc])[0]
    var = b.reduce("ReduceMean", sq, [-1], 1)
    std = b.node("Sqrt", [b.node("Add", [var, b.const(np.array(1e-5, np.float32))])[0]])[0]
    nrm = b.node("Div", [xc, std])[0]
    out = b.node("Add", [b.node("Mul", [nrm, b.node("Add", [gamma, b.const(
        np.array(1.0, np.float32))])[0]])[0], beta])[0]
    return b.add(out, FLOAT, x.shape)


def op_rmsnorm(b: Builder) -> Val | None:
    cands = last_dim_vals(b)
    if not cands:
        return None
    x = b.rng.choice(cands)
    src = x.name
    same = b.float_vals(lambda v: v.shape == x.shape and v is not x)
    if same and b.rng.random() < 0.5:
        src = b.node("Add", [x.name, b.rng.choice(same).name])[0]
    sq = b.node("Pow", [src, b.const(np.array(2.0, np.float32))])[0]
    ms = b.reduce("ReduceMean", sq, [-1], 1)
    inv = b.node("Reciprocal", [b.node("Sqrt", [b.node("Add", [ms, b.const(
        np.array(1e-6, np.float32))])[0]])[0]])[0]
    out = b.node("Mul", [b.node("Mul", [src, inv])[0], b.weight(x.shape[-1], scale=0.2)])[0]
    return b.add(out, FLOAT, x.shape)


def op_activation_block(b: Builder) -> Val | None:
    """Erf GELU, tanh GELU, SiLU or SwiGLU on a matmul."""
    x = b.rng.choice(b.float_vals())
    kind = b.rng.choice(["gelu", "gelu_tanh", "silu", "swiglu"])
    c = lambda v: b.const(np.array(v, np.float32))
    if kind == "gelu" and b.opset >= 9:
        e = b.node("Erf", [b.node("Div", [x.name, c(1.4142135)])[0]])[0]
        out = b.node("Mul", [b.node("Mul", [x.name, b.node("Add", [e, c(1.0)])[0]])[0],
                             c(0.5)])[0]
    elif kind == "gelu_tanh":
        cube = b.node("Pow", [x.name, c(3.0)])[0]
        inner = b.node("Add", [x.name, b.node("Mul", [cube, c(0.044715)])[0]])[0]
        t = b.node("Tanh", [b.node("Mul", [inner, c(0.7978846)])[0]])[0]
        out = b.node("Mul", [b.node("Mul", [x.name, c(0.5)])[0],
                             b.node("Add", [t, c(1.0)])[0]])[0]
    elif kind == "swiglu" and x.rank >= 1 and x.static(-1) and x.shape[-1] <= 64:
        k = x.shape[-1]
        gate = b.node("MatMul", [x.name, b.weight(k, 8, scale=0.3)])[0]
        up = b.node("MatMul", [x.name, b.weight(k, 8, scale=0.3)])[0]
        silu = b.node("Mul", [gate, b.node("Sigmoid", [gate])[0]])[0]
        out = b.node("MatMul", [b.node("Mul", [silu, up])[0], b.weight(8, k, scale=0.3)])[0]
    else:
        out = b.node("Mul", [x.name, b.node("Sigmoid", [x.name])[0]])[0]
    return b.add(out, FLOAT, x.shape)


def op_attention(b: Builder) -> Val | None:
    """Self-attention on [B, S, H]: projections, head split, scaled Q·Kᵀ, optional mask
    (additive from a mask input, causal, or none), Softmax, ·V, head merge, projection."""
    cands = b.float_vals(lambda v: v.rank == 3 and v.static(2) and v.shape[2] in (4, 8, 16))
    if not cands or b.opset < 9:
        return None
    x = b.rng.choice(cands)
    h = x.shape[2]
    heads = b.rng.choice([n for n in (1, 2, 4) if h % n == 0])
    d = h // heads
    split = b.ints([0, 0, heads, d])
    proj = [b.node("Reshape", [b.node("MatMul", [x.name, b.weight(h, h, scale=0.3)])[0],
                               split])[0] for _ in range(3)]
    q = b.node("Transpose", [proj[0]], perm=[0, 2, 1, 3])[0]
    if b.rng.random() < 0.5:
        k = b.node("Transpose", [proj[1]], perm=[0, 2, 3, 1])[0]
    else:
        kt = b.node("Transpose", [proj[1]], perm=[0, 2, 1, 3])[0]
        k = b.node("Transpose", [kt], perm=[0, 1, 3, 2])[0]
    v = b.node("Transpose", [proj[2]], perm=[0, 2, 1, 3])[0]
    scale = b.const(np.array(math.sqrt(d), np.float32))
    if b.rng.random() < 0.5:
        scores = b.node("Div", [b.node("MatMul", [q, k])[0], scale])[0]
    else:
        inv = b.const(np.array(1 / math.sqrt(d), np.float32))
        scores = b.node("MatMul", [b.node("Mul", [q, inv])[0], k])[0]
    scores = attention_mask(b, x, scores)
    probs = b.node("Softmax", [scores], axis=-1 if b.opset >= 13 else 3)[0]
    ctx = b.node("Transpose", [b.node("MatMul", [probs, v])[0]], perm=[0, 2, 1, 3])[0]
    merged = b.node("Reshape", [ctx, b.ints([0, 0, h])])[0]
    out = b.node("MatMul", [merged, b.weight(h, h, scale=0.3)])[0]
    if b.rng.random() < 0.5:
        out = b.node("Add", [out, x.name])[0]
    return b.add(out, FLOAT, x.shape)


def attention_mask(b: Builder, x: Val, scores: str) -> str:
    kind = b.rng.choice(["none", "input", "causal"])
    seq = x.shape[1]
    if kind == "causal" and isinstance(seq, int):
        mask = np.triu(np.full((seq, seq), -1e4, np.float32), 1)
        return b.node("Add", [scores, b.const(mask)])[0]
    if kind == "input":
        name = b.fresh("attention_mask")
        b.inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64,
                                                      [x.shape[0], seq]))
        m = b.node("Cast", [name], to=FLOAT)[0]
        m = b.unsqueeze(b.unsqueeze(m, [1]), [2])
        inv = b.node("Sub", [b.const(np.array(1.0, np.float32)), m])[0]
        add = b.node("Mul", [inv, b.const(np.array(-1e4, np.float32))])[0]
        return b.node("Add", [scores, add])[0]
    return scores


def op_if(b: Builder) -> Val | None:
    """If on a data-dependent condition; both branches read outer values."""
    x = b.rng.choice(b.float_vals())
    red = b.reduce("ReduceSum", x.name, list(range(x.rank)), 0) if x.rank else x.name
    cond = b.node("Greater", [red, b.const(np.array(0.0, np.float32))])[0]
    outs = []
    for tag, op in (("then", b.rng.choice(["Relu", "Tanh", "Sigmoid"])),
                    ("else", b.rng.choice(["Neg", "Abs", "Identity"]))):
        out = b.fresh(f"{tag}_out")
        body = [helper.make_node(op, [x.name], [out])]
        outs.append(helper.make_graph(body, f"{tag}_{b.counter}", [],
                                      [value_info(out, FLOAT, x.shape, b.rng)]))
    res = b.node("If", [cond], then_branch=outs[0], else_branch=outs[1])[0]
    return b.add(res, FLOAT, x.shape)


def op_loop(b: Builder) -> Val | None:
    """Loop with a constant trip count, one carried value and one scan output."""
    if b.opset < 11:
        return None
    x = b.rng.choice(b.float_vals())
    trips = b.rng.randint(1, 3)
    i, cin, acc = b.fresh("i"), b.fresh("cond"), b.fresh("acc")
    cout, acc2, scan = b.fresh("cond_out"), b.fresh("acc_out"), b.fresh("scan")
    outer = b.float_vals(lambda v: v.shape == x.shape and v is not x)
    captured = b.rng.choice(outer).name if outer else b.const(np.array(0.5, np.float32))
    body_nodes = [helper.make_node("Identity", [cin], [cout]),
                  helper.make_node("Tanh", [acc], [acc2]),
                  helper.make_node("Mul", [acc2, captured], [scan])]
    body = helper.make_graph(
        body_nodes, f"loop_{b.counter}",
        [helper.make_tensor_value_info(i, TensorProto.INT64, []),
         helper.make_tensor_value_info(cin, TensorProto.BOOL, []),
         value_info(acc, FLOAT, x.shape, b.rng)],
        [helper.make_tensor_value_info(cout, TensorProto.BOOL, []),
         value_info(acc2, FLOAT, x.shape, b.rng), value_info(scan, FLOAT, x.shape, b.rng)])
    trip = b.const(np.array(trips, np.int64))
    cond = b.const(np.array(True)) if b.rng.random() < 0.5 else ""
    final, scanned = b.node("Loop", [trip, cond, x.name], outputs=2, body=body)
    b.add(scanned, FLOAT, (trips,) + x.shape)
    return b.add(final, FLOAT, x.shape)


def op_scan(b: Builder) -> Val | None:
    """Scan over axis 0 accumulating a running sum (opset 9+ form)."""
    cands = b.float_vals(lambda v: v.rank >= 1 and all(v.static(i) for i in range(1, v.rank)))
    if not cands or b.opset < 9:
        return None
    x = b.rng.choice(cands)
    row = x.shape[1:]
    st, r, st2, r2 = b.fresh("st"), b.fresh("row"), b.fresh("st2"), b.fresh("r2")
    body = helper.make_graph(
        [helper.make_node("Add", [st, r], [st2]), helper.make_node("Relu", [r], [r2])],
        f"scan_{b.counter}",
        [helper.make_tensor_value_info(st, FLOAT, list(row)),
         helper.make_tensor_value_info(r, FLOAT, list(row))],
        [helper.make_tensor_value_info(st2, FLOAT, list(row)),
         helper.make_tensor_value_info(r2, FLOAT, list(row))])
    init = b.const(np.zeros(row, np.float32))
    total, rows = b.node("Scan", [init, x.name], outputs=2, body=body, num_scan_inputs=1)
    b.add(rows, FLOAT, x.shape)
    return b.add(total, FLOAT, row)


def op_ml(b: Builder) -> Val | None:
    """ai.onnx.ml Scaler or Normalizer on a 2-D float value."""
    cands = b.float_vals(lambda v: v.rank == 2 and v.static(1) and v.shape[1] <= 16)
    if not cands:
        return None
    x = b.rng.choice(cands)
    b.domains["ai.onnx.ml"] = b.domains.get("ai.onnx.ml", b.rng.choice([1, 2, 3]))
    c = x.shape[1]
    if b.rng.random() < 0.5:
        out = b.node("Scaler", [x.name], domain="ai.onnx.ml", offset=[0.1] * c,
                     scale=[2.0] * c)[0]
    else:
        out = b.node("Normalizer", [x.name], domain="ai.onnx.ml",
                     norm=b.rng.choice(["L1", "L2", "MAX"]))[0]
    return b.add(out, FLOAT, x.shape)


def op_function(b: Builder) -> Val | None:
    """A custom-domain op implemented by a model-local function (x * sigmoid(x) + bias)."""
    if b.opset < 13:
        return None
    x = b.rng.choice(b.float_vals())
    name = f"Local{len(b.functions)}"
    body = [helper.make_node("Sigmoid", ["X"], ["s"]),
            helper.make_node("Mul", ["X", "s"], ["m"]),
            helper.make_node("Add", ["m", "B"], ["Y"])]
    b.functions.append(helper.make_function("fuzz.custom", name, ["X", "B"], ["Y"], body,
                                            [helper.make_opsetid("", b.opset)]))
    b.domains["fuzz.custom"] = 1
    bias = b.const(np.array(0.25, np.float32))
    return b.add(b.node(name, [x.name, bias], domain="fuzz.custom")[0], FLOAT, x.shape)


def op_embedding(b: Builder) -> Val | None:
    """An int64 ids input gathered from an embedding table (ids are small: < 3)."""
    seq = b.rng.choice([3, 5, "S"])
    batch = b.rng.choice([1, 2, "N"])
    ids = b.fresh("input_ids")
    b.inputs.append(helper.make_tensor_value_info(ids, TensorProto.INT64, [batch, seq]))
    width = b.rng.choice([4, 8, 16])
    out = b.node("Gather", [b.weight(b.rng.randint(3, 10), width), ids])[0]
    return b.add(out, FLOAT, (batch, seq, width))


OPS: list[tuple[Callable[[Builder], Val | None], float]] = [
    (op_unary, 3), (op_binary, 4), (op_matmul, 3), (op_batched_matmul, 1), (op_gemm, 1),
    (op_reshape, 2), (op_transpose, 2), (op_concat, 1), (op_slice, 1.5), (op_gather, 1),
    (op_unsqueeze, 1), (op_squeeze, 1), (op_reduce, 1.5), (op_softmax, 1.5), (op_conv, 4),
    (op_cast, 1), (op_where, 1), (op_expand_tile, 1), (op_pad_clip, 1), (op_shape_arith, 1),
    (op_einsum_trilu_cumsum, 1), (op_noop, 1), (op_layernorm, 2), (op_rmsnorm, 1.5),
    (op_activation_block, 2), (op_attention, 2.5), (op_if, 1), (op_loop, 0.7), (op_scan, 0.7),
    (op_ml, 0.4), (op_function, 0.4), (op_embedding, 0.5),
]


# ----------------------------------------------------------------------------- assembling


def value_info(name: str, dtype: int, shape: Shape, rng: random.Random
               ) -> onnx.ValueInfoProto:
    """A value's declared type: the full shape, or now and then unknown dims, as some
    exporters write it."""
    if rng.random() < 0.15:
        return helper.make_tensor_value_info(name, dtype, [None] * len(shape))
    return helper.make_tensor_value_info(name, dtype, list(shape))


def first_input(b: Builder) -> None:
    """One or two float graph inputs of a random family: [N, C, H, W], [B, S, H], [N, C]..."""
    batch_sym, seq_sym = b.rng.choice(SYMBOLS)
    batch = batch_sym if b.rng.random() < 0.5 else b.rng.choice([1, 2])
    seq = seq_sym if b.rng.random() < 0.4 else b.rng.choice([3, 4, 5])
    family = b.rng.choice(["image", "sequence", "sequence", "matrix", "vector"])
    shape: Shape = {"image": (batch, b.rng.choice([1, 2, 3, 4]), 6, 6),
                    "sequence": (batch, seq, b.rng.choice([4, 8, 16])),
                    "matrix": (batch, b.rng.choice([3, 4, 8])),
                    "vector": (b.rng.choice([2, 4, 6]),)}[family]
    for _ in range(b.rng.choice([1, 1, 2])):
        name = b.fresh("x")
        b.inputs.append(helper.make_tensor_value_info(name, FLOAT, list(shape)))
        b.add(name, FLOAT, shape)


def pick_outputs(b: Builder, made: list[Val]) -> list[Val]:
    outs = [made[-1]] if made else [b.vals[-1]]
    for v in b.rng.sample(made, min(len(made), b.rng.choice([0, 0, 1, 2]))):
        if v not in outs:
            outs.append(v)
    return outs


def used_names(nodes: list[NodeProto]) -> set[str]:
    """Every name read by ``nodes`` or by the subgraphs of their attributes."""
    names = set()
    for node in nodes:
        names.update(node.input)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                names |= used_names(list(sub.node))
    return names


def choose_ir(rng: random.Random, opset: int, needs: int) -> int:
    low = max(needs, helper.find_min_ir_version_for([helper.make_opsetid("", opset)]))
    return rng.randint(min(low, 13), 13)


@dataclass
class Generated:
    model: ModelProto
    opset: int
    ops: list[str]


def build(seed: int) -> Generated:
    """One random model for ``seed`` (not yet validated)."""
    rng = random.Random(seed)
    opset = rng.choice(list(range(MIN_OPSET, MAX_OPSET + 1)) + [13, 17, 18] * 3)
    b = Builder(rng, opset)
    first_input(b)
    made: list[Val] = []
    weights = [w for _, w in OPS]
    for _ in range(rng.randint(2, 14)):
        op = rng.choices([o for o, _ in OPS], weights=weights)[0]
        val = op(b)
        if val is not None:
            made.append(val)
    graph_outputs = pick_outputs(b, made)
    used = used_names(b.nodes)
    inputs = [i for i in b.inputs if i.name in used or i.name in {v.name for v in graph_outputs}]
    outputs = [value_info(v.name, v.dtype, v.shape, rng) for v in graph_outputs]
    graph = helper.make_graph(b.nodes, f"fuzz_{seed}", inputs, outputs, b.inits)
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v)
                                                   for d, v in b.domains.items()]
    model = helper.make_model(graph, opset_imports=imports, functions=b.functions)
    model.ir_version = choose_ir(rng, opset, 8 if b.functions else 3)
    if model.ir_version < 4:
        model.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                           for t in b.inits)
    return Generated(model, opset, b.used)


def validate(model: ModelProto) -> str:
    """'' when ``model`` passes the full checker and runs in ONNX Runtime, else why not."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # noqa: BLE001
        return f"checker: {str(e).splitlines()[0][:200]}"
    from .harness import run_original_bytes

    return run_original_bytes(model.SerializeToString())


def generate(seed: int, tries: int = 20) -> tuple[Generated, int]:
    """The first valid model from ``seed``, ``seed+1000003``...; (model, rejected count)."""
    last = ""
    for attempt in range(tries):
        gen = build(seed + attempt * 1_000_003)
        last = validate(gen.model)
        if not last:
            return gen, attempt
    raise RuntimeError(f"no valid graph from seed {seed} in {tries} tries; last: {last}")
