"""0.5·x·(1 + erf(x/√2)) and its tanh approximation  ->  ai.onnxopt.GeluFused(x, bias?)

The exact (erf) GELU of BERT, ViT and RoBERTa, and the tanh approximation
0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) — GPT-2's "NewGELU", PyTorch's
``gelu(approximate="tanh")`` (Gemma, StarCoder2, GPT-BigCode) and BLOOM's factored
√(2/π)·x·(1 + 0.044715·x²). After normalization
``x/√2`` is ``x·(1/√2)`` and constants are the second operand; what still
varies is where the factor 0.5 sits:
``(x·0.5)·(1+…)``, ``x·((1+…)·0.5)`` or ``(x·(1+…))·0.5`` (exact in any order,
so all three are the same function), or ``Transpose(x·(1+…))·0.5`` where the 0.5 was moved
past a layout op (a speech front end's conv, then its channels moved last): the
Transpose is written again after the fused op. The constants are compared with a
tolerance loose enough for float16 models.

A bias ``Add(x, b)`` (b a per-feature constant) just before the activation is
folded in when nothing else reads the biased value; otherwise the Add stays
outside and the GELU fuses alone. Like a norm's residual, it is found next to
the pattern rather than in it, so that a GELU is never refused for its bias.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.ir.node import STANDARD_DOMAINS, Node
from onnxopt.ir.value import Value
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops import GeluAttrs
from onnxopt.ops.activations import SQRT_2_OVER_PI, SQRT_HALF, TANH_CUBIC
from onnxopt.rules._norm import feature_shape
from onnxopt.rules.base import Facts, Rule

TOLERANCE = 2e-3  # admits the float16 and bfloat16 roundings of 1/√2, √(2/π), 0.044715


def _bias(m: Match) -> tuple[Value, Value, Node] | None:
    """``x = Add(a, bias)`` with one constant per feature, read by the activation alone."""
    add = m.x.producer
    if add is None or add.op_type != "Add" or add.domain not in STANDARD_DOMAINS:
        return None
    if len(add.inputs) != 2 or any(v is None for v in add.inputs):
        return None
    a, bias = add.inputs if add.inputs[1].const is not None else reversed(add.inputs)
    if (bias.const is None or a.const is not None or bias.dtype != a.dtype or not a.shape
            or not m.x.shape):
        return None
    if feature_shape(bias, a.shape[-1], "bias") or not sd.same(a.shape[-1], m.x.shape[-1]):
        return None
    inside = {id(n) for n in m.nodes}
    if m.x.is_graph_output or any(id(n) not in inside for n, _ in m.x.uses()):
        return None
    return a, bias, add


def _half_placements(p: Builder, t, curve):
    """0.5 · t · curve, with the 0.5 on t, on the curve, or on the product."""
    half = p.const(value=0.5)
    return (p.Mul(p.Mul(t, half), curve, name="gelu"),
            p.Mul(t, p.Mul(curve, half), name="gelu"),
            p.Mul(p.Mul(t, curve), half, name="gelu"),
            # a GELU before a Transpose (a conv's channels moved last): normalize's
            # scale_through_layout moves the 0.5 past it, which is exact; the Transpose is
            # given back after the fused op
            p.Mul(p.Transpose(p.Mul(t, curve), name="layout", reads=("perm",)), half,
                  name="gelu"))


def _tanh_argument(p: Builder, x, one):
    """√(2/π)·(x + 0.044715·x³) as exporters spell it: expanded (GPT-2's NewGELU; PyTorch's
    tanh GELU, whose TorchScript export writes x³ as x·(x·x)) or factored as
    √(2/π)·x·(1 + 0.044715·x·x) (BLOOM)."""
    cubic = p.const(value=TANH_CUBIC, tolerance=TOLERANCE)
    scale = p.const(value=SQRT_2_OVER_PI, tolerance=TOLERANCE)
    square = p.Mul(x, x)
    cube = p.any(p.Pow(x, p.const(value=3.0)), p.Mul(x, square), p.Mul(square, x))
    expanded = p.Mul(p.Add(x, p.Mul(cube, cubic)), scale)
    square_term = p.any(p.Mul(square, cubic), p.Mul(p.Mul(x, cubic), x),
                        p.Mul(x, p.Mul(x, cubic)))
    factored = p.Mul(p.Mul(x, scale), p.Add(square_term, one))
    return p.any(expanded, factored)


@dataclass(frozen=True)
class GeluFacts(Facts):
    bias: tuple[Value, Value, Node] | None = None  # (x, bias, Add) folded into the GELU


class Gelu(Rule):
    """0.5·x·(1 + erf(x/√2)) | its tanh approximation  ->  ai.onnxopt.GeluFused(x, bias?)"""

    name = "gelu"
    root = "Mul"

    def pattern(self, p: Builder):
        x = p.var("x", dtype=FLOAT_TYPES)
        one = p.const(value=1.0)
        erf = p.Add(p.Erf(p.Mul(x, p.const(value=SQRT_HALF, tolerance=TOLERANCE)), name="erf"), one)
        tanh = p.Add(p.Tanh(_tanh_argument(p, x, one), name="tanh"), one)
        return p.any(*_half_placements(p, x, erf), *_half_placements(p, x, tanh))

    def legal(self, m: Match, target) -> GeluFacts:
        bias = _bias(m)  # folded when it can be; never a reason to refuse the GELU
        return GeluFacts(absorbed=(bias[2],) if bias else (), bias=bias)

    def rewrite(self, b: NodeBuilder, m: Match, facts: GeluFacts):
        attrs = GeluAttrs(approximate="tanh" if m.tanh is not None else "none")
        if facts.bias is None:
            out = b.fused("GeluFused", m.x, attrs=attrs)
        else:
            x, bias, _ = facts.bias
            out = b.fused("GeluFused", x, bias, attrs=attrs)
        if m.layout is not None:
            out = b.op("Transpose", out, perm=list(m.layout.attr("perm")))
        return out

    def describe(self, m: Match, facts: GeluFacts) -> str:
        kind = "tanh approximation" if m.tanh is not None else "erf"
        return kind + (", bias" if facts.bias is not None else "")
