"""0.5·x·(1 + erf(x/√2)) | 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))  ->  ai.onnxopt.GeluFused(x, bias?)

The exact (erf) GELU of BERT, ViT and RoBERTa and the tanh approximation of
GPT-2 ("NewGELU"). After normalization ``x/√2`` is ``x·(1/√2)`` and constants
are the second operand; what still varies is where the factor 0.5 sits:
``(x·0.5)·(1+…)``, ``x·((1+…)·0.5)`` or ``(x·(1+…))·0.5`` (exact in any order,
so all three are the same function). The constants are compared with a
tolerance loose enough for float16 models.

A bias ``Add(x, b)`` (b a per-feature constant) just before the activation is
folded in, when nothing else reads the biased value.
"""

from __future__ import annotations

from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.legality.predicates import float_dtype
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops.activations import SQRT_2_OVER_PI, SQRT_HALF, TANH_CUBIC
from onnxopt.rules._norm import feature_shape
from onnxopt.rules.base import RewriteBuilder, Rule

TOLERANCE = 2e-3  # admits the float16 and bfloat16 roundings of 1/√2, √(2/π), 0.044715


def _read_only_by(count: int):
    """The biased value is read by the activation alone (``count`` readers)."""
    def check(node) -> str | None:
        if node.output.num_uses != count or node.output.is_graph_output:
            return "the biased value is also read outside the activation"
        return None
    return check


def _half_placements(p: Builder, t, curve):
    """0.5 · t · curve, with the 0.5 on t, on the curve, or on the product."""
    half = p.const(value=0.5)
    return (p.Mul(p.Mul(t, half), curve, name="gelu"),
            p.Mul(t, p.Mul(curve, half), name="gelu"),
            p.Mul(p.Mul(t, curve), half, name="gelu"))


class Gelu(Rule):
    """0.5·x·(1 + erf(x/√2)) | its tanh approximation  ->  ai.onnxopt.GeluFused(x, bias?)"""

    name = "gelu"
    root = "Mul"
    fused_op = "GeluFused"

    def pattern(self, p: Builder):
        x = p.var("x", dtype=FLOAT_TYPES)
        bias = p.const("bias")

        def t(readers: int):
            return p.optional(p.Add(x, bias, name="bias_add", check=_read_only_by(readers)), x)

        one = p.const(value=1.0)
        erf_t = t(2)
        erf = p.Add(p.Erf(p.Mul(erf_t, p.const(value=SQRT_HALF, tolerance=TOLERANCE)),
                          name="erf"), one)
        tanh_t = t(3)
        cube = p.Mul(p.Pow(tanh_t, p.const(value=3.0)), p.const(value=TANH_CUBIC,
                                                               tolerance=TOLERANCE))
        inner = p.Mul(p.Add(tanh_t, cube), p.const(value=SQRT_2_OVER_PI, tolerance=TOLERANCE))
        tanh = p.Add(p.Tanh(inner, name="tanh"), one)
        return p.any(*_half_placements(p, erf_t, erf), *_half_placements(p, tanh_t, tanh))

    def legal(self, m: Match, target) -> str | None:
        if m.bias is None:
            return None
        x = m.x
        if x.shape is None or not x.shape:
            return f"%{x.name}: the shape of the GELU input is unknown"
        return float_dtype(m.bias, "a GELU bias") or feature_shape(m.bias, x.shape[-1], "bias")

    def rewrite(self, b: RewriteBuilder, m: Match):
        return b.fused("GeluFused", *([m.x, m.bias] if m.bias is not None else [m.x]),
                       approximate="tanh" if m.tanh is not None else "none")

    def describe(self, m: Match) -> str:
        kind = "tanh approximation" if m.tanh is not None else "erf"
        return kind + (", bias" if m.bias is not None else "")
