"""GeluFused, SiluFused and SwiGLUFused on ONNX Runtime's activation operators.

- ``com.microsoft.Gelu`` (erf), ``BiasGelu`` (erf with a per-feature bias) and
  ``FastGelu`` (the tanh approximation, optional per-feature bias): the same
  functions as the decompositions, to float32 rounding. ORT fuses the
  decompositions into these by itself on CPU, so on CPU they are on par.
- ONNX ``Gelu`` (opset 20, ``approximate`` none|tanh): where the model imports 20.
- ``com.microsoft.QuickGelu`` with ``alpha=1`` is ``x·sigmoid(x)``, SiLU; SwiGLU is
  ``QuickGelu(gate)·up``. ONNX ``Swish`` (opset 24) likewise where the model imports 24.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.ops import GeluAttrs, SiluAttrs, SwiGLUAttrs
from onnxopt.refusal import Refusal, refusal
from onnxopt.select.kernel import BOTH_PROVIDERS, MS_DOMAIN, Backend, Kernel

FLOAT_HALF = frozenset({"float32", "float16"})


def _approximate(kind: str, bias: str):
    """A requires: the GELU flavour must be ``kind``; ``bias`` is required|optional|any."""
    def requires(node: Node, attrs: GeluAttrs, target: Target) -> Refusal | None:
        approx = attrs.approximate
        x = node.inputs[0]
        if x.rank is None or x.rank < 1:
            return refusal("rank_unknown", f"%{x.name}: needs an input of known rank 1 or more, "
                           f"got {x.shape}", x.name)
        if kind != "any" and approx != kind:
            flavour = "tanh approximation" if kind == "tanh" else "erf"
            return refusal("gelu_flavour", f"computes the {flavour} GELU; the node is {approx}")
        b = node.input(1)
        if bias == "required" and b is None:
            return refusal("no_bias", "adds a bias first; the node has none (ort.Gelu covers it)")
        if bias != "any" and b is not None and (
                b.rank != 1 or x.shape is None or not sd.same(b.shape[0], x.shape[-1])):
            return refusal("bias_shape", f"%{b.name}: the bias must be 1-D [hidden], got "
                           f"{b.shape}", b.name)
        return None
    return requires


def _biased(b, node: Node):
    x, bias = node.inputs[0], node.input(1)
    return b.op("Add", x, bias) if bias is not None else x


def _emit_gelu(b, node: Node, attrs: GeluAttrs, target: Target):
    return [b.op("Gelu", _biased(b, node), domain=MS_DOMAIN)]


def _emit_bias_gelu(b, node: Node, attrs: GeluAttrs, target: Target):
    return [b.op("BiasGelu", node.inputs[0], node.input(1), domain=MS_DOMAIN)]


def _emit_fast_gelu(b, node: Node, attrs: GeluAttrs, target: Target):
    return [b.op("FastGelu", node.inputs[0], node.input(1), domain=MS_DOMAIN)]


def _emit_gelu20(b, node: Node, attrs: GeluAttrs, target: Target):
    return [b.op("Gelu", _biased(b, node), approximate=attrs.approximate)]


def _emit_quick_gelu(b, node: Node, attrs: SiluAttrs, target: Target):
    return [b.op("QuickGelu", node.inputs[0], domain=MS_DOMAIN, alpha=attrs.alpha)]


def _emit_swish24(b, node: Node, attrs: SiluAttrs, target: Target):
    return [b.op("Swish", node.inputs[0], alpha=attrs.alpha)]


def _emit_swiglu_quick(b, node: Node, attrs: SwiGLUAttrs, target: Target):
    gate, up = node.inputs[:2]
    return [b.op("Mul", b.op("QuickGelu", gate, domain=MS_DOMAIN, alpha=1.0), up)]


def kernels() -> list[Kernel]:
    ms = {MS_DOMAIN: 1}
    both = BOTH_PROVIDERS
    return [
        Kernel(name="ort.Gelu", implements="GeluFused", backend=Backend.ORT, emit=_emit_gelu,
               dtypes=FLOAT_HALF, providers=both, opsets=ms,
               requires=_approximate("none", "any"), cost=1.0, notes="com.microsoft; erf"),
        Kernel(name="ort.BiasGelu", implements="GeluFused", backend=Backend.ORT,
               emit=_emit_bias_gelu,
               dtypes=FLOAT_HALF, providers=both, opsets=ms,
               requires=_approximate("none", "required"), cost=1.0,
               notes="com.microsoft; erf with a per-feature bias"),
        Kernel(name="ort.FastGelu", implements="GeluFused", backend=Backend.ORT,
               emit=_emit_fast_gelu,
               dtypes=FLOAT_HALF, providers=both, opsets=ms,
               requires=_approximate("tanh", "optional"), cost=1.0,
               notes="com.microsoft; tanh approximation, optional per-feature bias"),
        Kernel(name="onnx.Gelu-20", implements="GeluFused", backend=Backend.ORT, emit=_emit_gelu20,
               dtypes=FLOAT_HALF, providers=both, min_opset=20, min_ort=(1, 17),
               requires=_approximate("any", "any"), cost=1.0, notes="ONNX Gelu"),
        Kernel(name="ort.QuickGelu", implements="SiluFused", backend=Backend.ORT,
               emit=_emit_quick_gelu, dtypes=FLOAT_HALF, providers=both, opsets=ms, cost=1.0,
               notes="com.microsoft QuickGelu(alpha) = x*sigmoid(alpha*x)"),
        Kernel(name="onnx.Swish-24", implements="SiluFused", backend=Backend.ORT,
               emit=_emit_swish24,
               dtypes=FLOAT_HALF, providers=both, min_opset=24, min_ort=(1, 23), cost=1.0,
               notes="ONNX Swish(alpha)"),
        Kernel(name="ort.QuickGelu.mul", implements="SwiGLUFused", backend=Backend.ORT,
               emit=_emit_swiglu_quick, dtypes=FLOAT_HALF, providers=both, opsets=ms, cost=1.0,
               notes="QuickGelu(gate) * up"),
    ]
