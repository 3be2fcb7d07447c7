"""x · sigmoid(x)  ->  ai.onnxopt.SiluFused(x)

SiLU (Swish with β = 1), as PyTorch exports ``F.silu``: a Sigmoid and a Mul
reading the same value.
"""

from __future__ import annotations

from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.match.pattern import Builder, Match
from onnxopt.rules.base import RewriteBuilder, Rule


class Silu(Rule):
    """x · sigmoid(x)  ->  ai.onnxopt.SiluFused(x)"""

    name = "silu"
    root = "Mul"
    fused_op = "SiluFused"

    def pattern(self, p: Builder):
        x = p.var("x", dtype=FLOAT_TYPES)
        return p.Mul(x, p.Sigmoid(x))

    def rewrite(self, b: RewriteBuilder, m: Match):
        return b.fused("SiluFused", m.x)

    def describe(self, m: Match) -> str:
        return "x·sigmoid(x)"
