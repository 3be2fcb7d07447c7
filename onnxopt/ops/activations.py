"""GeluFused, SiluFused and SwiGLUFused: the activations of transformer MLPs.

    GeluFused(X, bias?)  t = X + bias
        approximate="none": 0.5·t·(1 + erf(t/√2))
        approximate="tanh": 0.5·t·(1 + tanh(√(2/π)·(t + 0.044715·t³)))
    SiluFused(X)         X·sigmoid(alpha·X)   (SiLU/Swish: alpha = 1; quick GELU: alpha = 1.702)
    SwiGLUFused(gate, up) silu(gate)·up          (LLaMA/Mistral MLP gate; equal shapes)

The decompositions use the operation order the exporters write (``x/√2`` as a
multiplication by ``1/√2``, which is what normalization makes of the division;
the factor 0.5 is exact in any order), so a decomposed model computes what
the original did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from onnxopt import reference as ref
from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.ops.base import FusedAttrs, FusedOp, Port, optional
from onnxopt.ops.norms import scalar
from onnxopt.reference.activations import SQRT_2_OVER_PI, TANH_CUBIC

SQRT_HALF = 1.0 / math.sqrt(2.0)


@dataclass(frozen=True, kw_only=True)
class GeluAttrs(FusedAttrs):
    """``GeluFused``'s attributes: ``approximate`` is "none" (erf) or "tanh"."""

    approximate: str = "none"


@dataclass(frozen=True, kw_only=True)
class SiluAttrs(FusedAttrs):
    """``SiluFused``'s attributes: ``alpha`` scales the sigmoid's input (1: SiLU)."""

    alpha: float = 1.0


@dataclass(frozen=True, kw_only=True)
class SwiGLUAttrs(FusedAttrs):
    """``SwiGLUFused`` has no attributes."""


def decompose_gelu(b, node: Node):
    attrs = GeluAttrs.of(node)
    x, bias = node.inputs[0], node.input(1)
    dt = x.dtype
    t = b.op("Add", x, bias) if bias is not None else x
    if attrs.approximate == "tanh":
        cube = b.op("Mul", b.op("Pow", t, scalar(b, 3.0, dt, "three")),
                    scalar(b, TANH_CUBIC, dt, "gelu_c"))
        inner = b.op("Mul", b.op("Add", t, cube), scalar(b, SQRT_2_OVER_PI, dt, "sqrt_2_over_pi"))
        curve = b.op("Tanh", inner)
    else:
        curve = b.op("Erf", b.op("Mul", t, scalar(b, SQRT_HALF, dt, "sqrt_half")))
    one_plus = b.op("Add", curve, scalar(b, 1.0, dt, "one"))
    return [b.op("Mul", b.op("Mul", t, scalar(b, 0.5, dt, "half")), one_plus)]


def decompose_silu(b, node: Node):
    x = node.inputs[0]
    alpha = SiluAttrs.of(node).alpha
    inner = x
    if alpha != 1.0:
        inner = b.op("Mul", x, b.const(np.array(alpha, numpy_dtype(x.dtype or "float32")),
                                       "alpha"))
    return [b.op("Mul", x, b.op("Sigmoid", inner))]


def decompose_swiglu(b, node: Node):
    gate, up = node.inputs[0], node.inputs[1]
    return [b.op("Mul", b.op("Mul", gate, b.op("Sigmoid", gate)), up)]


def reference_gelu(x, bias=None, **attributes):
    """GeluFused on arrays (attributes as keywords), in X's dtype."""
    attrs = GeluAttrs.from_attributes(attributes)
    return ref.gelu(x, bias, approximate=attrs.approximate).astype(np.asarray(x).dtype)


def reference_silu(x, **attributes):
    """SiluFused on arrays (attributes as keywords), in X's dtype."""
    attrs = SiluAttrs.from_attributes(attributes)
    return ref.silu(x, alpha=attrs.alpha).astype(np.asarray(x).dtype)


def reference_swiglu(gate, up, **attributes):
    """SwiGLUFused on arrays, in the gate's dtype."""
    SwiGLUAttrs.from_attributes(attributes)
    return ref.swiglu(gate, up).astype(np.asarray(gate).dtype)


GELU = FusedOp(
    name="GeluFused",
    inputs=(Port("X"), optional("bias")),
    outputs=(Port("Y"),),
    attrs=GeluAttrs,
    decompose=decompose_gelu,
    reference=reference_gelu,
    doc=__doc__,
)

SILU = FusedOp(
    name="SiluFused",
    inputs=(Port("X"),),
    outputs=(Port("Y"),),
    attrs=SiluAttrs,
    decompose=decompose_silu,
    reference=reference_silu,
    doc=__doc__,
)

SWIGLU = FusedOp(
    name="SwiGLUFused",
    inputs=(Port("gate"), Port("up")),
    outputs=(Port("Y"),),
    attrs=SwiGLUAttrs,
    decompose=decompose_swiglu,
    reference=reference_swiglu,
    doc=__doc__,
)
