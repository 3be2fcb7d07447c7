"""LayerNormFused and RMSNormFused: normalisation over the last axis, with an optional residual.

    v = X + residual                      (only when has_residual)
    LayerNormFused: Y = (v - mean(v)) / sqrt(var(v) + epsilon) * gamma + beta
    RMSNormFused:   Y = v / sqrt(mean(v²) + epsilon) * gamma

Inputs: ``X [..., hidden]``; ``gamma``/``beta`` ``[hidden]``, each optional (an
absent gamma is all ones, an absent beta all zeros — normalization removes a
multiplication by ones, so a model's all-ones weight may already be gone);
``residual`` shaped like ``X``. Outputs: ``Y`` and, when the residual sum is
also read elsewhere (the next block's residual), ``S = X + residual``.

``compute_dtype`` (``""``: X's own dtype) is the type the statistics are
computed in: LLaMA and T5 cast a float16 input to float32 for the norm and
cast the normalised value back before multiplying by the weight. The
decomposition casts likewise, so it reproduces the original computation.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir.dtypes import dtype_code, numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.ops.base import FusedOp


def builder_opset(b) -> int:
    """The model's ONNX opset, which decides what ops a decomposition may use
    (LayerNormalization from 17). Stage 6 gives its builder the model's opset."""
    return int(b.opset or 17)


def reduce_mean_last(b, x):
    """ReduceMean over the last axis, keepdims."""
    return reduce_last(b, "ReduceMean", x)


def reduce_last(b, op_type: str, x):
    """``op_type`` (a Reduce op) over the last axis, keepdims, in the IR's (newest) spelling:
    the exporter writes the axes as an attribute where the model's opset wants one."""
    return b.op(op_type, x, b.const(np.array([-1], np.int64), "axes"), keepdims=1)


def scalar(b, value: float, dtype: str | None, hint: str):
    return b.const(np.array(value, numpy_dtype(dtype or "float32")), hint)


def _residual_sum(b, node: Node):
    """(v, S): the value to normalise and the sum output (None when there is no residual)."""
    x = node.inputs[0]
    residual = node.input(_RESIDUAL[node.op_type])
    if not node.attr("has_residual", 0) or residual is None:
        return x, None
    s = b.op("Add", x, residual)
    s.dtype, s.shape = x.dtype, x.shape
    return s, s


def _to_compute(b, node: Node, v):
    """Cast ``v`` to the compute dtype when the original did; returns (value, its dtype)."""
    want = node.attr("compute_dtype", "") or v.dtype
    if want and v.dtype and want != v.dtype:
        return b.op("Cast", v, to=dtype_code(want)), want
    return v, v.dtype


def _affine_out(b, node: Node, n, n_dtype, gamma, beta):
    """Cast back to the output dtype (before the weight, as LLaMA/T5 do), then gamma, beta."""
    out_dtype = node.outputs[0].dtype or n_dtype
    if out_dtype and n_dtype and out_dtype != n_dtype:
        n = b.op("Cast", n, to=dtype_code(out_dtype))
    if gamma is not None:
        n = b.op("Mul", n, gamma)
    if beta is not None:
        n = b.op("Add", n, beta)
    return n


def decompose_layer_norm(b, node: Node):
    gamma, beta = node.input(1), node.input(2)
    eps = float(node.attr("epsilon", 1e-5))
    v, s = _residual_sum(b, node)
    compute = node.attr("compute_dtype", "") or v.dtype
    out_dtype = node.outputs[0].dtype or v.dtype
    # LayerNormalization keeps X's type and computes its statistics in float32 (stash_type=1,
    # ONNX's default and what the exporters write): exact for float32, close for float16.
    if builder_opset(b) >= 17 and out_dtype == v.dtype and compute in (v.dtype, "float32"):
        if gamma is None:
            hidden = v.shape[-1]
            gamma = b.const(np.ones([hidden], numpy_dtype(v.dtype or "float32")), "ones")
        # No empty name for an absent beta: ORT 1.31 crashes on LayerNormalization(x, g, "").
        inputs = (v, gamma) if beta is None else (v, gamma, beta)
        y = b.op("LayerNormalization", *inputs, axis=-1, epsilon=eps, stash_type=1)
    elif builder_opset(b) >= 17 and _widened_throughout(v, compute, out_dtype, gamma, beta):
        # flax: a float16 input cast up, normalised and weighted in float32, left in float32.
        # Cast, then LayerNormalization in float32: the same arithmetic, and not the spelled-out
        # form, which ONNX Runtime 1.31's load-time LayerNorm fusion mis-types (it fuses the
        # statistics back onto the float16 input and the model fails to load).
        vc = b.op("Cast", v, to=dtype_code(compute))
        if gamma is None:
            gamma = b.const(np.ones([v.shape[-1]], numpy_dtype(compute)), "ones")
        inputs = (vc, gamma) if beta is None else (vc, gamma, beta)
        y = b.op("LayerNormalization", *inputs, axis=-1, epsilon=eps, stash_type=1)
    else:
        vc, dt = _to_compute(b, node, v)
        mean = reduce_mean_last(b, vc)
        d = b.op("Sub", vc, mean)
        var = reduce_mean_last(b, b.op("Pow", d, scalar(b, 2.0, dt, "two")))
        std = b.op("Sqrt", b.op("Add", var, scalar(b, eps, dt, "epsilon")))
        y = _affine_out(b, node, b.op("Div", d, std), dt, gamma, beta)
    return [y] if s is None else [y, s]


def _widened_throughout(v, compute: str, out_dtype: str, gamma, beta) -> bool:
    """The norm casts ``v`` up to ``compute`` and stays there: weights and output of that type
    (and, with no weight, a known hidden size for the ones LayerNormalization needs)."""
    return (bool(compute) and v.dtype != compute and out_dtype == compute
            and all(w is None or w.dtype == compute for w in (gamma, beta))
            and (gamma is not None or (v.shape is not None and isinstance(v.shape[-1], int))))


def decompose_rms_norm(b, node: Node):
    gamma = node.input(1)
    eps = float(node.attr("epsilon", 1e-6))
    v, s = _residual_sum(b, node)
    vc, dt = _to_compute(b, node, v)
    ms = reduce_mean_last(b, b.op("Pow", vc, scalar(b, 2.0, dt, "two")))
    std = b.op("Sqrt", b.op("Add", ms, scalar(b, eps, dt, "epsilon")))
    n = b.op("Mul", vc, b.op("Reciprocal", std))
    y = _affine_out(b, node, n, dt, gamma, None)
    return [y] if s is None else [y, s]


def _sum(x, residual, has_residual):
    v = np.asarray(x, np.float64)
    if has_residual and residual is not None:
        v = v + np.asarray(residual, np.float64)
    return v


def _finish(y, x, v, has_residual):
    dtype = np.asarray(x).dtype
    return (y.astype(dtype), v.astype(dtype)) if has_residual else y.astype(dtype)


def reference_layer_norm(x, gamma=None, beta=None, residual=None, *, epsilon=1e-5,
                         has_residual=0, **_):
    """NumPy LayerNorm in float64; returns Y, or (Y, S) with a residual."""
    v = _sum(x, residual, has_residual)
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (v - mean) / np.sqrt(var + epsilon)
    if gamma is not None:
        y = y * np.asarray(gamma, np.float64)
    if beta is not None:
        y = y + np.asarray(beta, np.float64)
    return _finish(y, x, v, has_residual)


def reference_rms_norm(x, gamma=None, residual=None, *, epsilon=1e-6, has_residual=0, **_):
    """NumPy RMSNorm in float64; returns Y, or (Y, S) with a residual."""
    v = _sum(x, residual, has_residual)
    y = v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + epsilon)
    if gamma is not None:
        y = y * np.asarray(gamma, np.float64)
    return _finish(y, x, v, has_residual)


_RESIDUAL = {"LayerNormFused": 3, "RMSNormFused": 2}

LAYER_NORM = FusedOp(
    name="LayerNormFused",
    inputs=("X", "gamma?", "beta?", "residual?"),
    outputs=("Y", "S?"),
    attrs={"epsilon": 1e-5, "axis": -1, "has_residual": 0, "compute_dtype": ""},
    decompose=decompose_layer_norm,
    reference=reference_layer_norm,
    doc=__doc__,
)

RMS_NORM = FusedOp(
    name="RMSNormFused",
    inputs=("X", "gamma?", "residual?"),
    outputs=("Y", "S?"),
    attrs={"epsilon": 1e-6, "has_residual": 0, "compute_dtype": ""},
    decompose=decompose_rms_norm,
    reference=reference_rms_norm,
    doc=__doc__,
)
