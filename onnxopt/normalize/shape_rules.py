"""Per-op shape and contents rules used by :mod:`onnxopt.normalize.shapes`.

``RULES[op](node)`` returns ``[(dtype, shape), ...]`` for the node's outputs
(``None`` where unknown); ``SYM_RULES[op](node)`` returns the contents of a
small integer output as a tuple of dims, or ``None``. Each rule follows the
ONNX operator definition; a rule that cannot tell returns ``None`` rather
than guess.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.normalize._common import ort_slice

UNARY = {"Identity", "Neg", "Sqrt", "Exp", "Log", "Abs", "Relu", "Sigmoid", "Tanh", "Erf", "Softmax",
         "LogSoftmax", "Reciprocal", "Sin", "Cos", "Floor", "Ceil", "Gelu", "HardSigmoid",
         "LeakyRelu", "Elu", "Softplus", "Round", "Sign", "CumSum", "Trilu", "Clip", "Selu",
         "HardSwish", "Mish", "Celu", "Dropout", "LayerNormalization", "RMSNormalization",
         "Softsign", "Not", "BatchNormalization", "InstanceNormalization"}
BOOL_OUT = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not",
            "IsNaN", "IsInf"}
BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual",
             "GreaterOrEqual", "And", "Or", "Xor", "Max", "Min", "Mod", "PRelu", "Sum", "Mean",
             "Where", "BitShift"}
CAST_TYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
              10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}


MAX_RANK = 64  # no real tensor has more axes; a larger "rank" comes from a corrupt shape


def _unknown_of_rank(n) -> tuple | None:
    """``n`` unknown dims, or None (rank unknown too) when ``n`` is not a plausible rank."""
    return (None,) * n if isinstance(n, int) and 0 <= n <= MAX_RANK else None


def _x(node: Node, i: int = 0) -> Value | None:
    return node.input(i)


def _shape(node: Node, i: int = 0):
    v = node.input(i)
    return None if v is None else v.shape


def _ints(v: Value | None) -> list[int] | None:
    """Constant integer contents of an input (None if not constant)."""
    if v is None or v.const is None:
        return None
    return [int(a) for a in v.const.numpy().reshape(-1)]


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def unary(node: Node):
    x = _x(node)
    dtype = "bool" if node.op_type in BOOL_OUT else x.dtype
    outs = [(dtype, x.shape)]
    if node.op_type == "Dropout" and len(node.outputs) > 1:
        outs.append(("bool", x.shape))
    if node.op_type == "LayerNormalization" and len(node.outputs) > 1:
        outs.extend([("float32", None)] * (len(node.outputs) - 1))
    return outs


def elementwise(node: Node):
    shapes = [v.shape for v in node.inputs if v is not None]
    shape = sd.broadcast_shapes(*shapes)
    if node.op_type in BOOL_OUT:
        dtype = "bool"
    elif node.op_type == "Where":
        dtype = node.input(1).dtype or node.input(2).dtype
    else:
        dtype = next((v.dtype for v in node.inputs if v is not None and v.dtype), None)
    return [(dtype, shape)]


def is_nan(node: Node):
    return [("bool", _shape(node))]


def cast(node: Node):
    return [(CAST_TYPES.get(node.attr("to")), _shape(node))]


def matmul(node: Node):
    a, b = _shape(node, 0), _shape(node, 1)
    dtype = _x(node).dtype
    if a is None or b is None or len(a) < 1 or len(b) < 1:
        return [(dtype, None)]
    if node.sem.get("transpose_a") and len(a) >= 2:
        a = a[:-2] + (a[-1], a[-2])
    if node.sem.get("transpose_b") and len(b) >= 2:
        b = b[:-2] + (b[-1], b[-2])
    if len(a) == 1 and len(b) == 1:
        return [(dtype, ())]
    if len(a) == 1:
        return [(dtype, b[:-2] + (b[-1],))]
    if len(b) == 1:
        return [(dtype, a[:-1])]
    batch = sd.broadcast_shapes(a[:-2], b[:-2])
    if batch is None:
        return [(dtype, None)]
    return [(dtype, batch + (a[-2], b[-1]))]


def gemm(node: Node):
    a, b = _shape(node, 0), _shape(node, 1)
    if a is None or b is None:
        return [(_x(node).dtype, None)]
    m = a[1] if node.attr("transA", 0) else a[0]
    n = b[0] if node.attr("transB", 0) else b[1]
    return [(_x(node).dtype, (m, n))]


def transpose(node: Node):
    s = _shape(node)
    if s is None:
        return None
    perm = node.attr("perm") or tuple(reversed(range(len(s))))
    if sorted(perm) != list(range(len(s))):
        return None  # not a permutation of the input's axes: ONNX Runtime refuses the node
    return [(_x(node).dtype, tuple(s[p] for p in perm))]


def reshape(node: Node):
    src, target = _x(node, 0), _x(node, 1)
    dims = target.sym
    if dims is None:
        ts = target.shape
        if ts is not None and len(ts) == 1 and isinstance(ts[0], int):
            return [(src.dtype, _unknown_of_rank(ts[0]))]
        return [(src.dtype, None)]
    allowzero = node.attr("allowzero", 0)
    out = []
    for i, d in enumerate(dims):
        if d == 0 and not allowzero:
            out.append(src.shape[i] if src.shape is not None and i < len(src.shape) else None)
        else:
            out.append(d)
    if -1 in out:
        k = out.index(-1)
        total = sd.product(src.shape) if src.shape is not None else None
        rest = sd.product(d for j, d in enumerate(out) if j != k)
        out[k] = sd.div(total, rest) if total is not None and rest is not None else None
    out = [None if isinstance(d, int) and d < 0 else d for d in out]
    return [(src.dtype, tuple(out))]


def unsqueeze(node: Node):
    s = _shape(node)
    axes = node.attr("axes") or _ints(_x(node, 1))
    if s is None or axes is None:
        return [(_x(node).dtype, None)]
    rank = len(s) + len(axes)
    axes = sorted(_axis(a, rank) for a in axes)
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        return [(_x(node).dtype, None)]  # axes ONNX Runtime refuses: the node fails there
    out, it = [], iter(s)
    for i in range(rank):
        out.append(1 if i in axes else next(it))
    return [(_x(node).dtype, tuple(out))]


def squeeze(node: Node):
    s = _shape(node)
    axes = node.attr("axes") or _ints(_x(node, 1))
    if s is None:
        return [(_x(node).dtype, None)]
    if axes is None:
        if any(d is None or isinstance(d, str) for d in s):
            return [(_x(node).dtype, None)]
        return [(_x(node).dtype, tuple(d for d in s if d != 1))]
    axes = {_axis(a, len(s)) for a in axes}
    if any(not 0 <= a < len(s) for a in axes):
        return [(_x(node).dtype, None)]
    return [(_x(node).dtype, tuple(d for i, d in enumerate(s) if i not in axes))]


def expand(node: Node):
    s, target = _shape(node), _x(node, 1)
    if target.sym is None or s is None:
        n = target.shape[0] if target.shape and isinstance(target.shape[0], int) else None
        rank = None if n is None or s is None else max(n, len(s))
        return [(_x(node).dtype, _unknown_of_rank(rank))]
    return [(_x(node).dtype, sd.broadcast_shapes(s, tuple(target.sym)))]


def concat(node: Node):
    shapes = [v.shape for v in node.inputs if v is not None]
    dtype = next((v.dtype for v in node.inputs if v is not None and v.dtype), None)
    if any(s is None for s in shapes) or not shapes:
        return [(dtype, None)]
    rank = len(shapes[0])
    axis = _axis(node.attr("axis", 0), rank)
    out = list(shapes[0])
    total = 0
    for s in shapes:
        total = sd.add(total, s[axis]) if total is not None else None
    out[axis] = total
    for i in range(rank):
        if i != axis:
            # every input has the same dim off the axis (ORT refuses the node otherwise): a
            # number any of them proves is the dim (a Loop-carried cache, declared
            # [.., 'kc_dim_3'], concatenated with new keys [.., 8] has head size 8)
            known = [s[i] for s in shapes if s[i] is not None]
            out[i] = next((d for d in known if isinstance(d, int)), known[0] if known else None)
    return [(dtype, tuple(out))]


def shape_op(node: Node):
    s = _shape(node)
    if s is None:
        return [("int64", (None,))]
    start, end = node.attr("start", 0), node.attr("end")
    dims = s[slice(start, end)]
    return [("int64", (len(dims),))]


def gather(node: Node):
    data, idx = _shape(node, 0), _shape(node, 1)
    if data is None or idx is None:
        return [(_x(node).dtype, None)]
    axis = _axis(node.attr("axis", 0), len(data))
    return [(_x(node).dtype, data[:axis] + idx + data[axis + 1:])]


def gather_nd(node: Node):
    """indices ``[..., k]`` pick k-tuples of leading data axes (after ``batch_dims``)."""
    data, idx = _shape(node, 0), _shape(node, 1)
    batch = node.attr("batch_dims", 0)
    if data is None or idx is None or not idx or not isinstance(idx[-1], int):
        return [(_x(node).dtype, None)]
    return [(_x(node).dtype, idx[:-1] + data[batch + idx[-1]:])]


def slice_op(node: Node):
    s = _shape(node)
    if s is None:
        return None
    starts, ends = _syms(_x(node, 1)), _syms(_x(node, 2))
    axes = _ints(_x(node, 3)) if node.input(3) is not None else list(range(len(starts or [])))
    steps = _ints(_x(node, 4)) if node.input(4) is not None else [1] * len(starts or [])
    if starts is None or ends is None or axes is None or steps is None:
        return [(_x(node).dtype, tuple(None for _ in s))]
    out = list(s)
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax = _axis(ax, len(s))
        out[ax] = _sliced_dim(s[ax], st, en, sp)
    return [(_x(node).dtype, tuple(out))]


def _sliced_dim(d, start, end, step):
    if isinstance(d, int) and isinstance(start, int) and isinstance(end, int):
        if step == 0:
            return None
        return len(range(*ort_slice(d, start, end, step).indices(d)))
    if step == -1 and _reverses_all(start, end):
        return d  # x[::-1], a flip (a reversed cumulative sum): every element, backwards
    if step != 1:
        return None
    if start == 0 and isinstance(end, int) and -2**62 < end < 0:
        # x[:-k] (a "same" convolution's one extra frame dropped): valid models have d >= k
        return sd.add(d, end)
    if isinstance(start, str) and isinstance(end, int) and end >= 2**62:
        # x[past:] (new positions after a cache): valid models have past <= d
        return sd.sub(d, start)
    if start != 0:
        return None
    if isinstance(end, int) and end >= 2**62:
        return d  # x[0:INT_MAX]
    if isinstance(end, str):
        # x[0:n] with a symbolic n: the model is valid only if n <= d, so the result has n rows
        return end
    return None


def _reverses_all(start, end) -> bool:
    """A step of -1 from the last element (start -1, or one clamped to it) past the first."""
    return (isinstance(start, int) and (start == -1 or start >= 2**62)
            and isinstance(end, int) and end <= -2**62)


def _syms(v: Value | None):
    if v is None:
        return None
    if v.sym is not None:
        return list(v.sym)
    return _ints(v)


def pad(node: Node):
    """Each padded axis grows by its two amounts (negative ones crop), whatever the mode; the
    amounts may be symbols (VITS pads its relative-position table by ``seq − window − 1`` on
    each side, computed at run time and spelled through PyTorch's ``[-1, 2]`` reversal)."""
    x, s = _x(node), _shape(node)
    if s is None:
        return None
    pads = _syms(_x(node, 1))
    axes = _ints(_x(node, 3)) if node.input(3) is not None else list(range(len(s)))
    if pads is None or axes is None or len(pads) != 2 * len(axes):
        return [(x.dtype, tuple(None for _ in s))]
    out = list(s)
    for k, ax in enumerate(axes):
        ax = _axis(ax, len(s))
        out[ax] = sd.add(sd.add(s[ax], pads[k]), pads[k + len(axes)])
    return [(x.dtype, tuple(out))]


def split(node: Node):
    s = _shape(node)
    if s is None:
        return None
    axis = _axis(node.attr("axis", 0), len(s))
    sizes = _ints(_x(node, 1)) if node.input(1) is not None else node.attr("split")
    n = len(node.outputs)
    if sizes is None:
        d = s[axis]
        if not isinstance(d, int) or d % n:
            return [(_x(node).dtype, None)] * n
        sizes = [d // n] * n
    return [(_x(node).dtype, s[:axis] + (k,) + s[axis + 1:]) for k in sizes]


def like_indices(node: Node):
    return [(_x(node).dtype, _shape(node, 1))]


def nonzero(node: Node):
    """``[rank(x), count]``: the count is data-dependent (a dim of its own)."""
    s = _shape(node)
    return [("int64", None if s is None else (len(s), None))]


def like_data(node: Node):
    return [(_x(node).dtype, _shape(node, 0))]


def matmul_integer(node: Node):
    (_, shape), = matmul(node)
    return [("int32", shape)]


def dynamic_quantize(node: Node):
    return [("uint8", _shape(node)), ("float32", ()), ("uint8", ())]


def quantize(node: Node):
    zero = node.input(2)
    return [(zero.dtype if zero is not None else "uint8", _shape(node))]


def dequantize(node: Node):
    scale = node.input(1)
    return [(scale.dtype if scale is not None else "float32", _shape(node))]


def range_op(node: Node):
    """``Range(start, limit, 1)`` has ``limit - start`` elements (when not negative): the
    positions of new tokens after a cache, ``Range(past, past + seq)``, number ``seq``."""
    start, limit, delta = (_syms(_x(node, i)) for i in range(3))
    dtype = _x(node).dtype
    if start and limit and delta and delta[0] == 1 and start[0] is not None:
        n = sd.sub(limit[0], start[0])
        if n is not None and not (isinstance(n, int) and n < 0):
            return [(dtype, (n,))]
    return [(dtype, (None,))]


def reduce(node: Node):
    s = _shape(node)
    axes = node.sem.get("axes")
    keep = node.sem.get("keepdims", True)
    if s is None or axes == "dynamic":
        return [(_x(node).dtype, None)]
    if axes is None:
        axes = tuple(range(len(s)))
    axes = {_axis(a, len(s)) for a in axes}
    if any(not 0 <= a < len(s) for a in axes):
        return [(_x(node).dtype, None)]
    out = tuple((1 if i in axes else d) for i, d in enumerate(s) if keep or i not in axes)
    return [(_x(node).dtype, out)]


def constant_of_shape(node: Node):
    target = _x(node)
    value = node.attr("value")
    dtype = value.dtype if value is not None else "float32"
    if target.sym is not None:
        return [(dtype, tuple(target.sym))]
    return [(dtype, None)]


def flatten(node: Node):
    s = _shape(node)
    if s is None:
        return None
    axis = _axis(node.attr("axis", 1), len(s))
    return [(_x(node).dtype, (sd.product(s[:axis]), sd.product(s[axis:])))]


def conv(node: Node):
    """``[N, M, out...]``: the batch of the input, M filters (the weight's first dim), and each
    spatial dim by ONNX's formula, ``(d + pads - dilation·(k-1) - 1) / stride + 1`` rounded
    down. A symbolic ``d`` gives a symbolic answer where :func:`symdim.floordiv` can write it:
    at stride 1 ``d + c`` (a "same" convolution keeps the length a mask was built for), and a
    strided one over a plain symbol (``samples//5 - 1``: the frames of a speech front end,
    which the model's own length arithmetic computes too); else a dim of its own (a fresh
    symbol later), but batch and channels stay proved."""
    x, w = _shape(node), _shape(node, 1)
    dtype = _x(node).dtype
    if x is None or w is None or len(x) != len(w) or len(x) < 3:
        return [(dtype, None)]
    n = len(x) - 2
    kernel = node.attr("kernel_shape") or w[2:]
    strides = node.attr("strides") or (1,) * n
    dilations = node.attr("dilations") or (1,) * n
    pads = node.attr("pads") or (0,) * (2 * n)
    auto_pad = node.attr("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if not (len(kernel) == len(strides) == len(dilations) == n and len(pads) == 2 * n):
        return [(dtype, None)]
    out = [x[0], w[0]]
    for i in range(n):
        d, k, s, dil = x[2 + i], kernel[i], strides[i], dilations[i]
        if not isinstance(k, int) or not isinstance(s, int) or s < 1:
            out.append(None)
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-d // s) if isinstance(d, int) else (d if s == 1 else None))
        else:
            lost = dil * (k - 1) + 1 - (0 if auto_pad == "VALID" else pads[i] + pads[n + i])
            if isinstance(d, int):
                out.append((d - lost) // s + 1 if d >= lost else None)
            else:
                out.append(sd.add(sd.floordiv(sd.sub(d, lost), s), 1))
    return [(dtype, tuple(out))]


def conv_integer(node: Node):
    """Conv's shape over quantized operands; the accumulator is int32."""
    (_, shape), = conv(node)
    return [("int32", shape)]


def tile(node: Node):
    s, reps = _shape(node), _x(node, 1)
    if s is None or reps.sym is None:
        return None
    return [(_x(node).dtype, tuple(sd.mul(d, r) for d, r in zip(s, reps.sym)))]


RULES = {op: unary for op in UNARY}
RULES.update({op: elementwise for op in BROADCAST})
RULES.update({
    "IsNaN": is_nan, "IsInf": is_nan, "Cast": cast, "MatMul": matmul, "Gemm": gemm,
    "Transpose": transpose, "Reshape": reshape, "Unsqueeze": unsqueeze, "Squeeze": squeeze,
    "Expand": expand, "Concat": concat, "Shape": shape_op, "Gather": gather, "GatherND": gather_nd,
    "Slice": slice_op, "Pad": pad,
    "ConstantOfShape": constant_of_shape, "Flatten": flatten, "Tile": tile, "Range": range_op,
    "Split": split, "Conv": conv, "ConvInteger": conv_integer, "MatMulInteger": matmul_integer, "DynamicQuantizeLinear": dynamic_quantize,
    "QuantizeLinear": quantize, "DequantizeLinear": dequantize, "GatherElements": like_indices, "ScatterND": like_data,
    "ScatterElements": like_data, "NonZero": nonzero,
    "ReduceMean": reduce, "ReduceSum": reduce, "ReduceMax": reduce, "ReduceMin": reduce,
    "ReduceProd": reduce, "ReduceL2": reduce, "ReduceSumSquare": reduce,
})


# --- contents of small integer tensors ------------------------------------------------------


def sym_shape(node: Node):
    s = _shape(node)
    if s is None:
        return None
    return tuple(s[slice(node.attr("start", 0), node.attr("end"))])


def sym_gather(node: Node):
    data, idx = _x(node, 0), _ints(_x(node, 1))
    if data.sym is None or idx is None or node.attr("axis", 0) != 0:
        return None
    return tuple(data.sym[i] for i in idx)


def sym_passthrough(node: Node):
    return _x(node).sym


def sym_concat(node: Node):
    parts = [v.sym for v in node.inputs]
    if any(p is None for p in parts):
        return None
    return tuple(d for p in parts for d in p)


def _table(v: Value):
    """The contents of ``v`` as an array of its static shape (of rank 2 or more), or None."""
    if v.sym is None or v.shape is None or not all(isinstance(d, int) for d in v.shape):
        return None
    if int(np.prod(v.shape)) != len(v.sym):
        return None
    table = np.empty(len(v.sym), dtype=object)
    table[:] = list(v.sym)
    return table.reshape(v.shape)


def sym_transpose(node: Node):
    """Contents of a transposed table of ints (rank 1 is the identity)."""
    x = _x(node)
    if x.shape is not None and len(x.shape) <= 1:
        return x.sym
    table = _table(x)
    perm = node.attr("perm")
    if table is None:
        return None
    return tuple(table.transpose(perm).reshape(-1))


def sym_slice(node: Node):
    if _x(node).shape is not None and len(_x(node).shape) > 1:
        return _sym_slice_table(node)
    data = _x(node).sym
    starts, ends = _ints(_x(node, 1)), _ints(_x(node, 2))
    steps = _ints(_x(node, 4)) if node.input(4) is not None else [1]
    if data is None or starts is None or ends is None or steps is None or len(starts) != 1:
        return None
    return tuple(data[slice(starts[0], ends[0], steps[0])])


def _sym_slice_table(node: Node):
    """Slice of a table of ints (PyTorch reverses its ``[-1, 2]`` view of a pad list so)."""
    table = _table(_x(node))
    starts, ends = _ints(_x(node, 1)), _ints(_x(node, 2))
    if table is None or starts is None or ends is None:
        return None
    axes = _ints(_x(node, 3)) if node.input(3) is not None else list(range(len(starts)))
    steps = _ints(_x(node, 4)) if node.input(4) is not None else [1] * len(starts)
    if axes is None or steps is None or 0 in steps:
        return None
    index = [slice(None)] * table.ndim
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax = _axis(ax, table.ndim)
        index[ax] = ort_slice(table.shape[ax], st, en, sp)
    return tuple(table[tuple(index)].reshape(-1))


def _binary(fn):
    def rule(node: Node):
        a, b = _x(node, 0).sym, _x(node, 1).sym
        if a is None or b is None:
            return None
        if len(a) == 1:
            a = a * len(b)
        if len(b) == 1:
            b = b * len(a)
        if len(a) != len(b):
            return None
        out = tuple(fn(x, y) for x, y in zip(a, b))
        return out
    return rule


def _int_div(a, b):
    if isinstance(a, int) and isinstance(b, int) and b:
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    exact = sd.div(a, b)
    if exact is None and isinstance(b, int) and b > 0 and _plain_symbol(a):
        # a dim is never negative: integer Div truncates it as floor does
        return sd.floordiv(a, b)
    return exact


def _plain_symbol(d) -> bool:
    """A dim's own symbol or a floor of one (never negative), not a sum or product."""
    return isinstance(d, str) and not any(c in d for c in "()*+-")


def _eq(a, b):
    if sd.same(a, b):
        return 1
    if isinstance(a, int) and isinstance(b, int):
        return 0
    if isinstance(a, str) and isinstance(b, int) and b < 0:
        return 0  # a dimension is never negative
    if isinstance(b, str) and isinstance(a, int) and a < 0:
        return 0
    return None


def _extreme(pick):
    """Max or Min of two contents: numbers compared; a dim against 0 (a dim is never
    negative); equal values are themselves; anything else is unknown (None), an element at a
    time, so ``Max(0, seq − 5)`` in a pad list leaves the other amounts known."""
    def rule(a, b):
        if isinstance(a, int) and isinstance(b, int):
            return pick(a, b)
        if sd.same(a, b):
            return a
        for x, y in ((a, b), (b, a)):
            if y == 0 and _plain_symbol(x):
                return x if pick is max else 0
        return None
    return rule


def _two_inputs(rule):
    """``rule`` for a variadic op (Max, Min) given two inputs; with more, unknown."""
    return lambda node: rule(node) if len(node.inputs) == 2 else None


def sym_where(node: Node):
    c, a, b = (_x(node, i).sym for i in range(3))
    if c is None or a is None or b is None or None in c:
        return None
    n = max(len(c), len(a), len(b))
    c, a, b = (x * n if len(x) == 1 else x for x in (c, a, b))
    if not len(c) == len(a) == len(b):
        return None
    return tuple(x if k else y for k, x, y in zip(c, a, b))


def sym_constant_of_shape(node: Node):
    target = _x(node).sym
    value = node.attr("value")
    if target is None or len(target) != 1 or not isinstance(target[0], int) or target[0] > 16:
        return None
    if value is not None and value.dtype not in ("int64", "int32"):
        return None
    fill = int(value.numpy().reshape(-1)[0]) if value is not None else 0
    return (fill,) * target[0]


def sym_cast(node: Node):
    if node.attr("to") in (6, 7, 9):
        return _x(node).sym
    return None


SYM_RULES = {
    "Shape": sym_shape, "Gather": sym_gather, "Unsqueeze": sym_passthrough,
    "Squeeze": sym_passthrough, "Identity": sym_passthrough, "Cast": sym_cast,
    "Concat": sym_concat, "Slice": sym_slice, "Reshape": sym_passthrough,
    "Add": _binary(sd.add), "Sub": _binary(sd.sub), "Mul": _binary(sd.mul),
    "Div": _binary(_int_div), "Equal": _binary(_eq), "Where": sym_where,
    "Max": _two_inputs(_binary(_extreme(max))), "Min": _two_inputs(_binary(_extreme(min))),
    "ConstantOfShape": sym_constant_of_shape, "Transpose": sym_transpose,
}

# The rules that also read contents of rank 2 and more (flat, in row-major order), or only
# their input's shape (Shape): the others take a flat tuple for a list, so they see only 0-d
# and 1-d contents.
TABLE_SYM_RULES = frozenset({"Reshape", "Identity", "Unsqueeze", "Squeeze", "Cast", "Slice",
                             "Transpose", "Shape"})
