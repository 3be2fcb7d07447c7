"""x · sigmoid(α·x)  ->  ai.onnxopt.SiluFused(x, alpha=α)

SiLU (Swish with β = 1), as PyTorch exports ``F.silu``: a Sigmoid and a Mul
reading the same value. The same form with a constant inside the sigmoid is
Swish-β, which CLIP and others use as "quick GELU" (α = 1.702): one fused op
with an ``alpha`` attribute covers both.
"""

from __future__ import annotations

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.legality.predicates import not_scalar_constant
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops import SiluAttrs
from onnxopt.refusal import Refusal
from onnxopt.rules.base import Rule


class Silu(Rule):
    """x · sigmoid(α·x)  ->  ai.onnxopt.SiluFused(x, alpha=α)"""

    name = "silu"
    root = "Mul"

    def pattern(self, p: Builder):
        x = p.var("x", dtype=FLOAT_TYPES)
        inner = p.optional(p.Mul(x, p.const("alpha"), name="scaled"), x)
        return p.Mul(x, p.Sigmoid(inner))

    def legal(self, m: Match, target) -> Refusal | None:
        if m.alpha is not None:
            return not_scalar_constant(m.alpha, "sigmoid's scale α")
        return None

    def rewrite(self, b: NodeBuilder, m: Match, facts):
        return b.fused("SiluFused", m.x, attrs=SiluAttrs(alpha=_alpha(m)))

    def describe(self, m: Match, facts) -> str:
        alpha = _alpha(m)
        return "x·sigmoid(x)" if alpha == 1.0 else f"x·sigmoid({alpha:g}·x)"


def _alpha(m: Match) -> float:
    return 1.0 if m.alpha is None else float(m.alpha.const.numpy().reshape(-1)[0])
