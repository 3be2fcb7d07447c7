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

from dataclasses import dataclass

import numpy as np

from onnxopt import reference as ref
from onnxopt.ir.dtypes import dtype_code, numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.ops.base import FusedAttrs, FusedOp, Port, optional


@dataclass(frozen=True, kw_only=True)
class NormAttrs(FusedAttrs):
    """What LayerNormFused and RMSNormFused share: ``epsilon`` (each op has its own default),
    whether a residual input is folded in, and ``compute_dtype`` ("": X's own)."""

    epsilon: float
    has_residual: bool = False
    compute_dtype: str = ""


@dataclass(frozen=True, kw_only=True)
class LayerNormAttrs(NormAttrs):
    """``LayerNormFused``'s attributes (``axis``: the normalised axis, -1 as rules make it)."""

    epsilon: float = 1e-5
    axis: int = -1


@dataclass(frozen=True, kw_only=True)
class RMSNormAttrs(NormAttrs):
    """``RMSNormFused``'s attributes."""

    epsilon: float = 1e-6


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


def residual_input(node: Node, attrs: NormAttrs) -> Value | None:
    """The residual a norm node folds in (None unless ``has_residual`` and the input is given)."""
    if not attrs.has_residual:
        return None
    op = LAYER_NORM if isinstance(attrs, LayerNormAttrs) else RMS_NORM
    return op.input(node, "residual")


def _residual_sum(b, node: Node, attrs: NormAttrs):
    """(v, S): the value to normalise and the sum output (None when there is no residual)."""
    x = node.inputs[0]
    residual = residual_input(node, attrs)
    if residual is None:
        return x, None
    s = b.op("Add", x, residual)
    s.dtype, s.shape = x.dtype, x.shape
    return s, s


def _to_compute(b, attrs: NormAttrs, v):
    """Cast ``v`` to the compute dtype when the original did; returns (value, its dtype)."""
    want = attrs.compute_dtype or v.dtype
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
    attrs = LayerNormAttrs.of(node)
    gamma, beta = node.input(1), node.input(2)
    eps = attrs.epsilon
    v, s = _residual_sum(b, node, attrs)
    compute = attrs.compute_dtype or v.dtype
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
        vc, dt = _to_compute(b, attrs, v)
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
    attrs = RMSNormAttrs.of(node)
    gamma = node.input(1)
    eps = attrs.epsilon
    v, s = _residual_sum(b, node, attrs)
    vc, dt = _to_compute(b, attrs, v)
    ms = reduce_mean_last(b, b.op("Pow", vc, scalar(b, 2.0, dt, "two")))
    std = b.op("Sqrt", b.op("Add", ms, scalar(b, eps, dt, "epsilon")))
    n = b.op("Mul", vc, b.op("Reciprocal", std))
    y = _affine_out(b, node, n, dt, gamma, None)
    return [y] if s is None else [y, s]


def reference_layer_norm(x, gamma=None, beta=None, residual=None, **attributes):
    """LayerNormFused on arrays (attributes as keywords); returns Y, or (Y, S) with a residual,
    in X's dtype."""
    attrs = LayerNormAttrs.from_attributes(attributes)
    y, v = ref.layer_norm(x, gamma, beta, eps=attrs.epsilon,
                          residual=residual if attrs.has_residual else None)
    return _finish(y, v, np.asarray(x).dtype, attrs)


def reference_rms_norm(x, gamma=None, residual=None, **attributes):
    """RMSNormFused on arrays (attributes as keywords); returns Y, or (Y, S) with a residual,
    in X's dtype."""
    attrs = RMSNormAttrs.from_attributes(attributes)
    y, v = ref.rms_norm(x, gamma, eps=attrs.epsilon,
                        residual=residual if attrs.has_residual else None)
    return _finish(y, v, np.asarray(x).dtype, attrs)


def _finish(y, v, dtype, attrs: NormAttrs):
    return (y.astype(dtype), v.astype(dtype)) if attrs.has_residual else y.astype(dtype)


LAYER_NORM = FusedOp(
    name="LayerNormFused",
    inputs=(Port("X"), optional("gamma"), optional("beta"), optional("residual")),
    outputs=(Port("Y"), optional("S")),
    attrs=LayerNormAttrs,
    decompose=decompose_layer_norm,
    reference=reference_layer_norm,
    doc=__doc__,
)

RMS_NORM = FusedOp(
    name="RMSNormFused",
    inputs=(Port("X"), optional("gamma"), optional("residual")),
    outputs=(Port("Y"), optional("S")),
    attrs=RMSNormAttrs,
    decompose=decompose_rms_norm,
    reference=reference_rms_norm,
    doc=__doc__,
)
