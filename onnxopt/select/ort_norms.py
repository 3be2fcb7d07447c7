"""LayerNormFused and RMSNormFused on ONNX Runtime's normalisation operators.

- ONNX ``LayerNormalization`` (opset 17): statistics in float32 (``stash_type=1``),
  exactly the decomposition. A folded residual is added with ``Sum``, not
  ``Add``: ORT's own graph optimizer rewrites ``Add → LayerNormalization`` into
  ``com.microsoft.SkipLayerNormalization``, which on the CPU provider (ORT 1.31)
  took 7x the time of the two ops it replaces (0.27 ms against 0.037 ms on
  [1, 128, 512]); ``Sum`` computes the same sum and is not matched.
- ``com.microsoft.SkipLayerNormalization``: X + skip, then LayerNorm; output 3 is
  the sum. Emitted only when the cost model or tuning says it pays (on CUDA).
- ``SimplifiedLayerNormalization`` is RMSNorm, ``x / sqrt(mean(x²) + eps) * gamma``,
  0.5x the decomposition's time on CPU — but ORT registers it in the ONNX domain,
  where it is no standard op, so a model holding it fails the ONNX checker. It is
  listed and rejected for that; ``decompose.RMSNormFused.ort_fusable`` gets the same
  kernel from standard ops: it spells RMSNorm ``Pow → ReduceMean → Add → Sqrt →
  Div(x, ·) → Mul(gamma)``, the form ORT's own optimizer fuses into
  SimplifiedLayerNormalization at load time (the op's decomposition multiplies by a
  ``Reciprocal``, which ORT does not fuse).
- ``com.microsoft.SkipSimplifiedLayerNormalization``: the same with the residual
  inside; no faster than the decomposition on CPU.
- ONNX ``RMSNormalization`` (opset 23): only where the model imports opset 23.

A float16 model whose norm computes in float32 (``compute_dtype``) rounds back to
float16 before multiplying by gamma; the fused ORT ops multiply first, so those
nodes keep the decomposition.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.ops import LayerNormAttrs, NormAttrs
from onnxopt.ops.norms import residual_input
from onnxopt.refusal import Refusal, refusal
from onnxopt.select._emit import i64, ones, scalar
from onnxopt.select.kernel import BOTH_PROVIDERS, MS_DOMAIN, Backend, Kernel

FLOAT_HALF = frozenset({"float32", "float16"})


def _compute_matches(node: Node, attrs: NormAttrs, target: Target) -> Refusal | None:
    """The fused ORT ops compute in float32 and keep X's type: the model must do the same."""
    x = node.inputs[0]
    compute = attrs.compute_dtype or x.dtype
    out = node.outputs[0].dtype or x.dtype
    if out != x.dtype:
        return refusal("output_dtype_differs", f"the norm's output is {out} but its input "
                       f"{x.dtype}; the ORT op keeps the type", x.name)
    if compute != x.dtype:
        return refusal("compute_dtype_differs", f"the model computes the norm of {x.dtype} "
                       f"%{x.name} in {compute} and rounds back before the weight; the ORT op "
                       "applies the weight before rounding", x.name)
    if isinstance(attrs, LayerNormAttrs) and attrs.axis not in (-1, (x.rank or 0) - 1):
        return refusal("not_last_axis", f"normalises axis {attrs.axis}, not the last")
    if x.shape is None or not isinstance(x.shape[-1], int):
        return refusal("hidden_size_unknown", f"%{x.name}: the normalised dimension is not a "
                       "known size", x.name)
    return None


def _needs_residual(node: Node, attrs: NormAttrs, target: Target) -> Refusal | None:
    if reason := _compute_matches(node, attrs, target):
        return reason
    x, skip = node.inputs[0], residual_input(node, attrs)
    if skip is None:
        return refusal("no_residual", "fuses a residual Add; the node has none")
    if x.rank not in (2, 3) or skip.shape != x.shape:
        return refusal("residual_shape", "needs a 2-D or 3-D input and a residual of its shape; "
                       f"%{x.name} is {x.shape}", x.name)
    return None


def _gamma(b, node: Node):
    gamma = node.input(1)
    if gamma is None:
        x = node.inputs[0]
        gamma = ones(b, x.shape[-1], x.dtype, "gamma")
    return gamma


def _sum(b, node: Node, attrs: NormAttrs, op: str):
    """(value to normalise, the sum output or None)."""
    residual = residual_input(node, attrs)
    if residual is None:
        return node.inputs[0], None
    s = b.op(op, node.inputs[0], residual)
    return s, s


def _with_sum(node: Node, y, s):
    return [y, s] if len(node.outputs) > 1 else [y]


# ----------------------------------------------------------------------------- LayerNorm


def _emit_layer_norm(b, node: Node, attrs: NormAttrs, target: Target):
    v, s = _sum(b, node, attrs, "Sum")
    beta = node.input(2)
    y = b.op("LayerNormalization", v, _gamma(b, node), beta, axis=-1,
             epsilon=attrs.epsilon, stash_type=1)
    return _with_sum(node, y, s)


def _emit_skip_layer_norm(b, node: Node, attrs: NormAttrs, target: Target):
    beta = node.input(2)
    outs = b.op("SkipLayerNormalization", node.inputs[0], residual_input(node, attrs),
                _gamma(b, node), beta, domain=MS_DOMAIN, epsilon=attrs.epsilon,
                outputs=4 if len(node.outputs) > 1 else 1)
    return [outs[0], outs[3]] if len(node.outputs) > 1 else [outs]


# ----------------------------------------------------------------------------- RMSNorm


def _emit_rms_fusable(b, node: Node, attrs: NormAttrs, target: Target):
    v, s = _sum(b, node, attrs, "Add")
    x = node.inputs[0]
    two = scalar(b, 2.0, x.dtype, "two")
    ms = b.op("ReduceMean", b.op("Pow", v, two), i64(b, [-1], "axes"), keepdims=1)
    std = b.op("Sqrt", b.op("Add", ms, scalar(b, attrs.epsilon, x.dtype, "eps")))
    y = b.op("Mul", b.op("Div", v, std), _gamma(b, node))
    return _with_sum(node, y, s)


def _rms_fusable_requires(node: Node, attrs: NormAttrs, target: Target) -> Refusal | None:
    if reason := _compute_matches(node, attrs, target):
        return reason
    gamma = node.input(1)
    if gamma is None or (gamma.const is not None and gamma.const.size <= 1 << 16
                         and np.all(gamma.const.numpy() == 1)):
        # ORT's fusion needs the weight's Mul, and normalization removes a Mul by ones
        return refusal("weight_all_ones", "ORT fuses the spelling only with its weight Mul, "
                       "and the weight is all ones")
    return None


def _not_standard(node: Node, attrs: NormAttrs, target: Target) -> Refusal | None:
    return refusal("not_a_standard_op", "ORT registers it in the ONNX domain, where it is no "
                   "standard op: the model would fail the ONNX checker "
                   "(decompose.RMSNormFused.ort_fusable makes ORT create it)")


def _emit_simplified(b, node: Node, attrs: NormAttrs, target: Target):
    v, s = _sum(b, node, attrs, "Add")
    y = b.op("SimplifiedLayerNormalization", v, _gamma(b, node), axis=-1,
             epsilon=attrs.epsilon, stash_type=1)
    return _with_sum(node, y, s)


def _emit_skip_simplified(b, node: Node, attrs: NormAttrs, target: Target):
    outs = b.op("SkipSimplifiedLayerNormalization", node.inputs[0], residual_input(node, attrs),
                _gamma(b, node), domain=MS_DOMAIN, epsilon=attrs.epsilon,
                outputs=4 if len(node.outputs) > 1 else 1)
    return [outs[0], outs[3]] if len(node.outputs) > 1 else [outs]


def _emit_rms23(b, node: Node, attrs: NormAttrs, target: Target):
    v, s = _sum(b, node, attrs, "Add")
    y = b.op("RMSNormalization", v, _gamma(b, node), axis=-1,
             epsilon=attrs.epsilon, stash_type=1)
    return _with_sum(node, y, s)


def kernels() -> list[Kernel]:
    ms = {MS_DOMAIN: 1}
    return [
        Kernel(name="onnx.LayerNormalization-17", implements="LayerNormFused", backend=Backend.ORT,
               emit=_emit_layer_norm, dtypes=FLOAT_HALF, providers=BOTH_PROVIDERS,
               min_opset=17, requires=_compute_matches, cost=0.9,
               notes="residual added with Sum (ORT would turn Add into SkipLayerNormalization)"),
        Kernel(name="ort.SkipLayerNormalization", implements="LayerNormFused", backend=Backend.ORT,
               emit=_emit_skip_layer_norm, dtypes=FLOAT_HALF, providers=BOTH_PROVIDERS,
               opsets=ms, requires=_needs_residual, cost=1.0,
               notes="com.microsoft; X + skip then LayerNorm, the sum as output 3"),
        Kernel(name="decompose.RMSNormFused.ort_fusable", implements="RMSNormFused",
               backend=Backend.DECOMPOSE, emit=_emit_rms_fusable, dtypes=FLOAT_HALF,
               providers=BOTH_PROVIDERS, requires=_rms_fusable_requires, cost=0.6,
               notes="standard ops in the spelling ORT fuses into SimplifiedLayerNormalization"),
        Kernel(name="ort.SimplifiedLayerNormalization", implements="RMSNormFused",
               backend=Backend.ORT, emit=_emit_simplified, dtypes=FLOAT_HALF,
               providers=BOTH_PROVIDERS, requires=_not_standard, cost=0.6,
               notes="RMSNorm; ORT registers it in the ONNX domain, not a standard op"),
        Kernel(name="ort.SkipSimplifiedLayerNormalization", implements="RMSNormFused",
               backend=Backend.ORT, emit=_emit_skip_simplified, dtypes=FLOAT_HALF,
               providers=BOTH_PROVIDERS, opsets=ms, requires=_needs_residual, cost=1.0,
               notes="com.microsoft; X + skip then RMSNorm, the sum as output 3"),
        Kernel(name="onnx.RMSNormalization-23", implements="RMSNormFused", backend=Backend.ORT,
               emit=_emit_rms23, dtypes=FLOAT_HALF, providers=BOTH_PROVIDERS, min_opset=23,
               min_ort=(1, 23), requires=_compute_matches, cost=0.7,
               notes="ONNX RMSNormalization"),
    ]
