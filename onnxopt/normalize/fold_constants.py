"""Constant folding: a node whose inputs are all constants becomes a constant.

Why: exporters leave behind whole subgraphs that compute fixed numbers at run
time — shape arithmetic on static dimensions, ``Range``/``Trilu`` building a
causal mask, ``Cast``/``Unsqueeze`` of literals. Until those are numbers, the
matcher sees a web of plumbing instead of "a constant causal mask", and every
pattern would need a variant per exporter.

Evaluation follows ONNX Runtime's semantics exactly for the common ops (NumPy
implementations below: integer ``Div`` truncates toward zero, ``Pow`` keeps the
base's type, ``Range`` accumulates like ORT, ``Reshape`` applies the 0/-1 rules).
Other deterministic standard-domain ops go through ``onnx.reference`` on a
one-node model; any failure just leaves the node alone. ``Shape``/``Size`` of a
value whose shape is fully static fold even when the value is not constant.

Never folded: random or side-effecting ops, non-standard domains, nodes with
subgraphs, outputs that are graph outputs (an output's name must stay a node
output), anything whose result would exceed 1,000,000 elements or 16 MB, and
anything that makes the model heavier than the constants it frees by more than
4 KB (a dequantized int8 weight, a materialised broadcast): the output of
onnxopt is never bigger than its input. A folded value must also keep the
dtype and shape that the model's own inference gives it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np

from onnxopt.evaluation.reference import evaluate_node
from onnxopt.ir.dtypes import FLOAT_TYPES, dtype_name, from_numpy, numpy_dtype
from onnxopt.ir.exactness import record, site
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.semantics import reduction_semantics
from onnxopt.ir.tensor import LazyTensor
from onnxopt.normalize._common import STANDARD_DOMAINS, ort_slice, static_shape
from onnxopt.normalize.shape_rules import RULES
from onnxopt.rewrite.driver import PassResult

MAX_ELEMENTS = 1_000_000
MAX_BYTES = 16 * 1024 * 1024
# A fold may make the file this much heavier than the constants it frees (shape vectors, small
# masks); beyond that, the output would be bigger than the input — dequantized int8 weights
# turned into float32, a broadcast materialised — and folding is a loss.
MAX_GROWTH_BYTES = 4096

NAME = "fold_constants"
NEVER_FOLD = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout", "If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty",
    "SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength", "SplitToSequence",
    "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement",
})
# Ops whose output can be far larger than their inputs: the reference fallback folds them
# only when the output's static shape is known to fit under the cap.
_GROWING = frozenset({
    "Pad", "Resize", "Upsample", "OneHot", "EyeLike", "Gemm", "Conv", "ConvTranspose", "Einsum",
    "Col2Im", "CenterCropPad", "GridSample", "DFT", "STFT", "MelWeightMatrix", "BlackmanWindow",
    "HannWindow", "HammingWindow", "Compress", "NonZero", "Unique", "TopK", "GatherElements",
    "GatherND", "ScatterND", "ScatterElements",
})
_NATIVE_KINDS = "biuf"  # NumPy computes these exactly as ORT does; others go to the fallback
# Ops whose floating-point results are the same bits whoever computes them: IEEE's correctly
# rounded arithmetic, comparisons and selections, and ops that only move elements. A fold of
# any other op on floats (Exp, Pow, Tanh, sums, products, MatMul) follows NumPy's order and
# libm, not ONNX Runtime's kernels: a site of onnxopt.ir.exactness, kept only where what it
# feeds is fused (elsewhere the node stays, and ONNX Runtime folds it with its own kernels).
EXACT_FLOAT_FOLDS = frozenset({
    "Add", "Sub", "Mul", "Div", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil", "Round",
    "Sign", "Relu", "Min", "Max", "Clip", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin",
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf", "Where",
    "Identity", "Cast", "CastLike", "Reshape", "Flatten", "Unsqueeze", "Squeeze", "Concat",
    "Split", "Gather", "Slice", "Transpose", "Expand", "Tile", "Pad", "Trilu", "Range",
    "ConstantOfShape", "Constant", "Shape", "Size",
})


# A hand walk, not a pattern (onnxopt.rewrite.pattern): any node whose inputs are all constants,
# evaluated: a fact of values, not a shape of producers.
def fold_constants(model: Model) -> PassResult:
    """Replace constant-input nodes (and Shape/Size of static shapes) by constants."""
    count = 0
    for graph in model.graph.all_graphs():
        for node in graph:
            if _try_fold(model, graph, node):
                count += 1
    return PassResult(count)


def inexact_fold(node: Node) -> bool:
    """Whether folding ``node`` may give other bits than ONNX Runtime computes for it."""
    if node.op_type in EXACT_FLOAT_FOLDS:
        return False
    return any(v is not None and v.dtype in FLOAT_TYPES for v in (*node.inputs, *node.outputs))


def _try_fold(model: Model, graph: Graph, node: Node) -> bool:
    if node.domain not in STANDARD_DOMAINS or node.op_type in NEVER_FOLD or node.subgraphs():
        return False
    inexact = site(NAME, node) if inexact_fold(node) else None
    if inexact is not None and not model.exactness.permits(NAME, node):
        return False
    outs = node.outputs
    if any(o.is_graph_output for o in outs) or not any(o.num_uses for o in outs):
        return False  # a graph output must stay a node output; a dead node is DCE's job
    if node.op_type in ("Shape", "Size"):
        results = _static_shape_op(node)
    else:
        if not node.inputs and node.op_type != "Constant":
            return False
        if any(v is not None and v.const is None for v in node.inputs):
            return False
        if any(v is not None and _too_big(v.const.size, v.const.nbytes) for v in node.inputs):
            return False
        if not _output_fits(node):
            return False
        results = _evaluate(model, node)
    if results is None or len(results) != len(outs):
        return False
    arrays = []
    for out, r, expected in zip(outs, results, _expected_shapes(node)):
        if not isinstance(r, np.ndarray) or (r.dtype.kind not in "biufc"
                                             and not _bfloat16_from_finite_float32(node, r)):
            return False
        if _too_big(r.size, r.nbytes):
            return False
        if out.dtype is not None and from_numpy(r.dtype) != out.dtype:
            return False  # the evaluator disagrees with the model's declared type: do not guess
        if not _shape_agrees(expected, r.shape):
            return False  # ... or with the shape inference knows: a fold must not change it
        arrays.append(np.array(r, order="C"))  # (ascontiguousarray turns 0-d into 1-d)
    if sum(a.nbytes for a in arrays) > _freed_bytes(node) + MAX_GROWTH_BYTES:
        return False  # the constant would weigh more than the computation it replaces
    if node.op_type == "Identity" and node.inputs[0].const is not None:
        graph.replace_all_uses(outs[0], node.inputs[0])  # no copy of the same numbers
        graph.remove(node)
        return True
    for out, r in zip(outs, arrays):
        if out.num_uses:
            const = graph.add_constant(LazyTensor.from_array(r), hint=out.name)
            if inexact is not None:
                record(const, (inexact,))
            graph.replace_all_uses(out, const)
    graph.remove(node)
    return True


def _expected_shapes(node: Node) -> list:
    """The shapes the node's outputs must have: its shape rule's answer (which follows ONNX
    Runtime), else what the model's own inference recorded."""
    known = [o.shape for o in node.outputs]
    rule = RULES.get(node.op_type)
    if rule is None:
        return known
    try:
        result = rule(node) or []
    except Exception:  # noqa: BLE001 - an odd node: the recorded shapes decide
        return known
    return [r[1] if i < len(result) and (r := result[i])[1] is not None else k
            for i, k in enumerate(known)]


def _shape_agrees(declared, actual: tuple[int, ...]) -> bool:
    """A folded value keeps the shape the model says it has: same rank, same static dims
    (a symbolic or unknown dim may take any size)."""
    if declared is None:
        return True
    if len(declared) != len(actual):
        return False
    return all(not isinstance(d, int) or d == a for d, a in zip(declared, actual))


def _freed_bytes(node: Node) -> int:
    """Bytes of the constants that die with ``node`` (read by it alone)."""
    seen: set[int] = set()
    freed = 0
    for v in node.inputs:
        if v is None or v.const is None or id(v) in seen or v.is_graph_output:
            continue
        seen.add(id(v))
        if all(user is node for user, _ in v._uses):
            freed += v.const.nbytes
    return freed


def _too_big(size: int, nbytes: int) -> bool:
    return size > MAX_ELEMENTS or nbytes > MAX_BYTES


def _static_shape_op(node: Node) -> list[np.ndarray] | None:
    x = node.inputs[0]
    if x is None:
        return None
    shape = x.const.shape if x.const is not None else x.shape
    if not static_shape(shape):
        return None
    if node.op_type == "Size":
        return [np.array(math.prod(shape), dtype=np.int64)]
    start = node.attr("start", 0)
    end = node.attr("end")
    return [np.array(shape[start:end], dtype=np.int64)]


def _output_fits(node: Node) -> bool:
    """Refuse before evaluating when the output is known (or bound) to be too large."""
    for out in node.outputs:
        if static_shape(out.shape) and math.prod(out.shape) > MAX_ELEMENTS:
            return False
    try:
        estimate = _estimate_size(node)
    except Exception:  # noqa: BLE001 - an odd node: let the evaluator decide (and fail)
        return True
    if estimate is not None:
        return estimate <= MAX_ELEMENTS
    if node.op_type in _GROWING:
        return all(static_shape(o.shape) for o in node.outputs)
    return True


def _estimate_size(node: Node) -> int | None:
    op = node.op_type
    shapes = [v.const.shape if v is not None else None for v in node.inputs]

    def ints(i: int) -> list[int]:
        return [int(d) for d in node.inputs[i].const.numpy().reshape(-1)]

    if op == "ConstantOfShape":
        return math.prod(ints(0))
    if op == "Expand":
        return math.prod(np.broadcast_shapes(shapes[0], tuple(ints(1))))
    if op == "Tile":
        return math.prod(d * r for d, r in zip(shapes[0], ints(1)))
    if op == "Range":
        start, limit, delta = (float(node.inputs[i].const.numpy().reshape(())) for i in range(3))
        return max(0, math.ceil((limit - start) / delta)) if delta else 0
    if op == "MatMul":
        a, b = shapes
        m = a[-2] if len(a) >= 2 else 1
        n = b[-1] if len(b) >= 2 else 1
        batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
        return math.prod(batch) * m * n
    if op == "Gather":
        data, idx = shapes
        axis = node.attr("axis", 0)
        return math.prod(idx) * math.prod(data) // max(1, data[axis])
    if op in _BROADCASTING:
        return math.prod(np.broadcast_shapes(*[s for s in shapes if s is not None]))
    return None


# --- evaluation -----------------------------------------------------------------------------

def _evaluate(model: Model, node: Node) -> list[np.ndarray] | None:
    arrays = [None if v is None else v.const.numpy() for v in node.inputs]
    impl = _NUMPY_OPS.get(node.op_type)
    native = all(a is None or a.dtype.kind in _NATIVE_KINDS for a in arrays)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if impl is not None and native:
            try:
                result = impl(node, arrays)
            except Exception:  # noqa: BLE001 - invalid inputs: leave the node to fail at run time
                return None
            if result is not None:
                return [np.asarray(r) for r in result]
        if node.op_type == "MatMul" and (node.sem.get("transpose_a") or node.sem.get("transpose_b")):
            return None  # the reference evaluator does not know the IR's transposition flags
        return evaluate_node(model, node, arrays)


Impl = Callable[[Node, list], "list[np.ndarray] | None"]


def _same_dtype(arrays: list) -> bool:
    dts = {a.dtype for a in arrays if a is not None}
    return len(dts) == 1


def _binary(fn) -> Impl:
    def run(node: Node, a: list) -> list | None:
        x, y = a
        if not _same_dtype(a):
            return None
        return [np.asarray(fn(x, y)).astype(x.dtype, copy=False)]
    return run


def _compare(fn) -> Impl:
    def run(node: Node, a: list) -> list | None:
        if not _same_dtype(a):
            return None
        return [np.asarray(fn(a[0], a[1]), dtype=bool)]
    return run


def _unary_float(fn) -> Impl:
    def run(node: Node, a: list) -> list | None:
        x = a[0]
        if x.dtype.kind != "f":
            return None
        return [np.asarray(fn(x)).astype(x.dtype, copy=False)]
    return run


def _logical(fn) -> Impl:
    def run(node: Node, a: list) -> list | None:
        if any(x.dtype != np.bool_ for x in a):
            return None
        return [np.asarray(fn(*a), dtype=bool)]
    return run


def _div(node: Node, a: list) -> list | None:
    x, y = a
    if not _same_dtype(a):
        return None
    if x.dtype.kind in "iu":
        if np.any(y == 0):
            return None
        # ONNX (and ORT) integer division truncates toward zero, like C.
        q = np.floor_divide(x, y)
        inexact = (np.remainder(x, y) != 0) & ((x < 0) != (y < 0))
        return [(q + inexact.astype(q.dtype)).astype(x.dtype)]
    return [np.divide(x, y)]


def _pow(node: Node, a: list) -> list | None:
    x, y = a
    if x.dtype.kind == "f":
        if x.dtype == np.float64:
            return [np.power(x, y.astype(np.float64))]
        return [np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)]
    if x.dtype.kind in "iu":
        if y.dtype.kind == "f":
            return [np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)]
        if np.any(y < 0):
            return None
        return [np.power(x, y.astype(x.dtype))]
    return None


def _bfloat16_from_finite_float32(node: Node, result: np.ndarray) -> bool:
    """Whether ``result``, a bfloat16 array (ml_dtypes' kind "V", no NumPy float), is a Cast
    of finite float32 constants: there ONNX Runtime's Cast rounds to nearest, ties to even (1.30
    and 1.31 agree with ml_dtypes on every finite float32 tried, ties and subnormals among
    them). Other bfloat16 results are not folded: no NumPy arithmetic is known to round as
    ONNX Runtime does. A bfloat16 model's scale is often spelled Cast(float constant)."""
    x = node.inputs[0] if node.op_type == "Cast" and node.inputs else None
    if x is None or x.const is None or result.dtype != numpy_dtype("bfloat16"):
        return False
    values = x.const.numpy()
    return values.dtype == np.float32 and bool(np.all(np.isfinite(values)))


def _cast(node: Node, a: list) -> list | None:
    x = a[0]
    target = dtype_name(node.attr("to"))
    if target == "bfloat16" and x.dtype == np.float32 and np.all(np.isfinite(x)):
        return [x.astype(numpy_dtype("bfloat16"))]  # see _bfloat16_from_finite_float32
    if target is None or target in ("string", "bfloat16", "int4", "uint4", "float4e2m1") \
            or target.startswith(("float8", "type")):
        return None  # NumPy has no exact equivalent: the reference evaluator decides
    dt = numpy_dtype(target)
    if x.dtype.kind == "f" and dt.kind in "iu":
        if not np.all(np.isfinite(x)):
            return None
        info = np.iinfo(dt)
        if np.any(x < info.min) or np.any(x > info.max):
            return None  # out of range: undefined in C, so no single right answer
    return [x.astype(dt)]


def _reshape(node: Node, a: list) -> list | None:
    x, shape = a[0], [int(s) for s in a[1].reshape(-1)]
    allowzero = node.attr("allowzero", 0)
    out = []
    for i, s in enumerate(shape):
        if s == 0 and not allowzero:
            if i >= x.ndim:
                return None
            out.append(x.shape[i])
        else:
            out.append(s)
    if out.count(-1) > 1 or any(s < -1 for s in out):
        return None
    return [np.reshape(x, out)]


def _axes(node: Node, a: list, index: int) -> list[int] | None:
    axes = node.attr("axes")
    if axes is None and len(a) > index and a[index] is not None:
        axes = [int(v) for v in a[index].reshape(-1)]
    return None if axes is None else list(axes)


def _normalize(axes: list[int], rank: int) -> list[int] | None:
    out = [ax + rank if ax < 0 else ax for ax in axes]
    if any(ax < 0 or ax >= rank for ax in out) or len(set(out)) != len(out):
        return None
    return out


def _unsqueeze(node: Node, a: list) -> list | None:
    x = a[0]
    axes = _axes(node, a, 1)
    if axes is None:
        return None
    norm = _normalize(axes, x.ndim + len(axes))
    if norm is None:
        return None
    return [np.expand_dims(x, tuple(sorted(norm)))]


def _squeeze(node: Node, a: list) -> list | None:
    x = a[0]
    axes = _axes(node, a, 1)
    if axes is None:
        return [np.squeeze(x)]
    norm = _normalize(axes, x.ndim)
    if norm is None or any(x.shape[ax] != 1 for ax in norm):
        return None
    return [np.squeeze(x, axis=tuple(norm))]


def _concat(node: Node, a: list) -> list | None:
    if not _same_dtype(a) or not a:
        return None
    axis = node.attr("axis")
    return [np.concatenate(a, axis=axis)]


def _gather(node: Node, a: list) -> list | None:
    data, idx = a
    if idx.dtype.kind not in "iu":
        return None
    return [np.take(data, idx.astype(np.int64), axis=node.attr("axis", 0))]


def _slice(node: Node, a: list) -> list | None:
    data = a[0]
    starts = [int(v) for v in a[1].reshape(-1)]
    ends = [int(v) for v in a[2].reshape(-1)]
    axes = [int(v) for v in a[3].reshape(-1)] if len(a) > 3 and a[3] is not None \
        else list(range(len(starts)))
    steps = [int(v) for v in a[4].reshape(-1)] if len(a) > 4 and a[4] is not None \
        else [1] * len(starts)
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        return None
    axes_n = _normalize(axes, data.ndim)
    if axes_n is None:
        return None
    index = [slice(None)] * data.ndim
    for st, en, ax, sp in zip(starts, ends, axes_n, steps):
        if sp == 0:
            return None
        index[ax] = ort_slice(data.shape[ax], st, en, sp)
    return [data[tuple(index)]]


def _transpose(node: Node, a: list) -> list | None:
    perm = node.attr("perm")
    return [np.transpose(a[0], perm)]


def _where(node: Node, a: list) -> list | None:
    c, x, y = a
    if c.dtype != np.bool_ or x.dtype != y.dtype:
        return None
    return [np.where(c, x, y)]


def _range(node: Node, a: list) -> list | None:
    start, limit, delta = (np.asarray(v).reshape(()) for v in a)
    if not _same_dtype([start, limit, delta]) or delta == 0:
        return None
    dt = start.dtype
    if dt.kind in "iu":
        s, l_, d = int(start), int(limit), int(delta)
        n = max(0, -((s - l_) // d))  # ceil((l - s) / d) in exact integers
        if n > MAX_ELEMENTS:
            return None
        return [(s + d * np.arange(n, dtype=np.int64)).astype(dt)]
    # ORT: n = ceil(double(limit - start) / delta); out[0] = start; out[i] = out[i-1] + delta (in T)
    n = int(max(0.0, math.ceil(float(np.subtract(limit, start, dtype=dt)) / float(delta))))
    if n > MAX_ELEMENTS:
        return None
    steps = np.full(n, delta, dtype=dt)
    if n:
        steps[0] = start
    return [np.cumsum(steps, dtype=dt)]


def _constant_of_shape(node: Node, a: list) -> list | None:
    shape = [int(v) for v in a[0].reshape(-1)]
    if any(d < 0 for d in shape):
        return None
    value = node.attr("value")
    fill = np.zeros(1, dtype=np.float32) if value is None else value.numpy().reshape(-1)
    if fill.size != 1 or fill.dtype.kind not in _NATIVE_KINDS:
        return None
    return [np.full(shape, fill[0], dtype=fill.dtype)]


def _expand(node: Node, a: list) -> list | None:
    x, shape = a[0], tuple(int(v) for v in a[1].reshape(-1))
    return [np.broadcast_to(x, np.broadcast_shapes(x.shape, shape)).copy()]


def _trilu(node: Node, a: list) -> list | None:
    x = a[0]
    k = int(a[1].reshape(())) if len(a) > 1 and a[1] is not None else 0
    if x.ndim < 2:
        return None
    return [np.triu(x, k) if node.attr("upper", 1) else np.tril(x, k)]


def _variadic(fn) -> Impl:
    def run(node: Node, a: list) -> list | None:
        if not a or not _same_dtype(a):
            return None
        if a[0].dtype.kind == "f" and any(np.isnan(x).any() for x in a):
            return None  # NaN propagation differs between implementations
        out = a[0]
        for x in a[1:]:
            out = fn(out, x)
        return [np.asarray(out).astype(a[0].dtype, copy=False)]
    return run


def _cumsum(node: Node, a: list) -> list | None:
    x = a[0]
    axis = int(np.asarray(a[1]).reshape(-1)[0])
    if axis < 0:
        axis += x.ndim
    if not 0 <= axis < x.ndim:
        return None
    y = np.flip(x, axis) if node.attr("reverse", 0) else x
    c = np.cumsum(_wide(y), axis=axis).astype(x.dtype, copy=False)
    if node.attr("exclusive", 0):
        c = np.concatenate([np.zeros_like(np.take(c, [0], axis=axis)),
                            np.take(c, range(c.shape[axis] - 1), axis=axis)], axis=axis)
    return [np.flip(c, axis) if node.attr("reverse", 0) else c]


def _reduce(fn, floats_only: bool = False, needs_elements: bool = False) -> Impl:
    def run(node: Node, a: list) -> list | None:
        x = a[0]
        if floats_only and x.dtype.kind != "f":
            return None
        sem = reduction_semantics(node)
        axes, keepdims = sem["axes"], sem["keepdims"]
        if axes == "dynamic":
            return None
        if axes == ():
            return [x]
        norm = None if axes is None else _normalize(list(axes), x.ndim)
        if axes is not None and norm is None:
            return None
        if needs_elements and x.size == 0:
            return None
        axis = None if norm is None else tuple(norm)
        return [np.asarray(fn(_wide(x), axis=axis, keepdims=keepdims)).astype(x.dtype, copy=False)]
    return run


def _wide(x: np.ndarray) -> np.ndarray:
    """float16 accumulates in float32, as ORT's kernels do; other types as they are."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _tile(node: Node, a: list) -> list | None:
    reps = [int(v) for v in a[1].reshape(-1)]
    if len(reps) != a[0].ndim or any(r < 0 for r in reps):
        return None
    return [np.tile(a[0], reps)]


def _matmul(node: Node, a: list) -> list | None:
    x, y = a
    if not _same_dtype(a):
        return None
    if node.sem.get("transpose_a"):
        x = np.swapaxes(x, -1, -2)
    if node.sem.get("transpose_b"):
        y = np.swapaxes(y, -1, -2)
    return [np.matmul(_wide(x), _wide(y)).astype(x.dtype, copy=False)]


def _isinf(node: Node, a: list) -> list | None:
    x = a[0]
    if x.dtype.kind != "f":
        return None
    neg, pos = node.attr("detect_negative", 1), node.attr("detect_positive", 1)
    return [np.isinf(x) & (((x < 0) & bool(neg)) | ((x > 0) & bool(pos)))]


_NUMPY_OPS: dict[str, Impl] = {
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _div,
    "Pow": _pow,
    "Sqrt": _unary_float(np.sqrt),
    "Exp": _unary_float(np.exp),
    "Log": _unary_float(np.log),
    "Reciprocal": _unary_float(np.reciprocal),
    "Floor": _unary_float(np.floor),
    "Ceil": _unary_float(np.ceil),
    "Neg": lambda node, a: [np.negative(a[0])],
    "Abs": lambda node, a: [np.abs(a[0])],
    "Identity": lambda node, a: [a[0]],
    "Cast": _cast,
    "Reshape": _reshape,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "Gather": _gather,
    "Slice": _slice,
    "Transpose": _transpose,
    "Equal": _compare(np.equal),
    "Less": _compare(np.less),
    "Greater": _compare(np.greater),
    "LessOrEqual": _compare(np.less_equal),
    "GreaterOrEqual": _compare(np.greater_equal),
    "Not": _logical(np.logical_not),
    "And": _logical(np.logical_and),
    "Or": _logical(np.logical_or),
    "Xor": _logical(np.logical_xor),
    "Where": _where,
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
    "Expand": _expand,
    "Trilu": _trilu,
    "Min": _variadic(np.minimum),
    "Max": _variadic(np.maximum),
    "CumSum": _cumsum,
    "ReduceSum": _reduce(np.sum),
    "ReduceMean": _reduce(np.mean, floats_only=True),
    "ReduceMax": _reduce(np.max, needs_elements=True),
    "ReduceMin": _reduce(np.min, needs_elements=True),
    "Tile": _tile,
    "MatMul": _matmul,
    "IsNaN": lambda node, a: [np.isnan(a[0])] if a[0].dtype.kind == "f" else None,
    "IsInf": _isinf,
}
_BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual",
    "GreaterOrEqual", "And", "Or", "Xor", "Where", "Min", "Max", "Sum", "Mean", "Mod",
    "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu",
})
