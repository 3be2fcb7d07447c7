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

import numpy as np

from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.ops.base import FusedOp
from onnxopt.ops.norms import scalar

SQRT_HALF = 1.0 / math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715


def decompose_gelu(b, node: Node):
    x, bias = node.inputs[0], node.input(1)
    dt = x.dtype
    t = b.op("Add", x, bias) if bias is not None else x
    if node.attr("approximate", "none") == "tanh":
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
    alpha = node.attr("alpha", 1.0)
    inner = x
    if alpha != 1.0:

        inner = b.op("Mul", x, b.const(np.array(alpha, numpy_dtype(x.dtype or "float32")),
                                       "alpha"))
    return [b.op("Mul", x, b.op("Sigmoid", inner))]


def decompose_swiglu(b, node: Node):
    gate, up = node.inputs[0], node.inputs[1]
    return [b.op("Mul", b.op("Mul", gate, b.op("Sigmoid", gate)), up)]


def reference_gelu(x, bias=None, *, approximate="none", **_):
    """NumPy GELU in float64, returned in X's dtype."""
    t = np.asarray(x, np.float64)
    if bias is not None:
        t = t + np.asarray(bias, np.float64)
    if approximate == "tanh":
        y = 0.5 * t * (1.0 + np.tanh(SQRT_2_OVER_PI * (t + TANH_CUBIC * t ** 3)))
    else:
        erf = np.vectorize(math.erf, otypes=[np.float64])
        y = 0.5 * t * (1.0 + erf(t * SQRT_HALF))
    return y.astype(np.asarray(x).dtype)


def _sigmoid(t):
    return 0.5 * (1.0 + np.tanh(0.5 * t))  # no overflow for large |t|


def reference_silu(x, *, alpha=1.0, **_):
    t = np.asarray(x, np.float64)
    return (t * _sigmoid(alpha * t)).astype(np.asarray(x).dtype)


def reference_swiglu(gate, up, **_):
    g = np.asarray(gate, np.float64)
    return (g * _sigmoid(g) * np.asarray(up, np.float64)).astype(np.asarray(gate).dtype)


GELU = FusedOp(
    name="GeluFused",
    inputs=("X", "bias?"),
    outputs=("Y",),
    attrs={"approximate": "none"},
    decompose=decompose_gelu,
    reference=reference_gelu,
    doc=__doc__,
)

SILU = FusedOp(
    name="SiluFused",
    inputs=("X",),
    outputs=("Y",),
    attrs={"alpha": 1.0},
    decompose=decompose_silu,
    reference=reference_silu,
    doc=__doc__,
)

SWIGLU = FusedOp(
    name="SwiGLUFused",
    inputs=("gate", "up"),
    outputs=("Y",),
    decompose=decompose_swiglu,
    reference=reference_swiglu,
    doc=__doc__,
)
