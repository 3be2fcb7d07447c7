"""x / sqrt(mean(x²) + ε) · γ  ->  ai.onnxopt.RMSNormFused(x, γ, residual?)

LLaMA, Mistral and T5 spell it ``Pow(x, 2) → ReduceMean(last) → Add(ε) → Sqrt
→ Div(1, ·) (TorchScript) | Reciprocal (dynamo) → Mul(x, ·) → Mul(γ)``; a
``Div(x, sqrt)`` form and ``Mul(x, x)`` for the square are accepted too. In a
float16 model the norm is computed in float32 between two Casts (LLaMA casts
x up and the result back before the weight; T5 casts only for the mean): the
fused op records ``compute_dtype`` and its decomposition casts likewise. In a
float32 model those Casts are no-ops that normalization has removed, as it
removes an all-ones weight, so the norm may end at the weight, at the Cast
back, or at the scaling: one rule per last op, all named ``rms_norm``.

A residual ``Add(a, b)`` feeding the norm is folded in; when its sum is also
read elsewhere (the next block's residual) the fused op returns it as a
second output.
"""

from __future__ import annotations

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.ir.node import Node
from onnxopt.legality.predicates import last_axis, not_scalar_constant
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops import RMSNormAttrs
from onnxopt.refusal import Refusal
from onnxopt.rules._norm import (
    REDUCE_READS,
    NormFacts,
    divides_a_value,
    emit_norm,
    ends_later,
    find_residual,
    hidden_size,
    norm_facts,
    per_feature_weights,
    residual_text,
)
from onnxopt.rules.base import Rule


class RMSNorm(Rule):
    """x / sqrt(mean(x²) + ε) · γ  ->  ai.onnxopt.RMSNormFused(x, γ, residual?)"""

    name = "rms_norm"
    # It ends at the weight Mul, at x / sqrt(...) (an all-ones weight), or at the Cast back.
    root = ("Mul", "Div", "Cast")

    def pattern(self, p: Builder):
        x = p.var("x", dtype=FLOAT_TYPES)
        xin = p.optional(p.Cast(x, name="cast_in", reads=("to",)), x)
        square = p.any(p.Pow(xin, p.const(value=2.0)), p.Mul(xin, xin))
        mean = p.ReduceMean(square, p.maybe(p.const()), name="mean", check=_not_centered,
                            reads=REDUCE_READS)
        std = p.Sqrt(p.Add(mean, p.var("eps")), name="sqrt")
        rstd = p.any(p.Reciprocal(std), p.Div(p.const(value=1.0), std))

        def normed(check=None):
            return p.any(p.Mul(xin, rstd, name="normed", check=check),
                         p.Div(xin, std, name="normed", check=divides_a_value(check)))

        def back(check=None):
            return p.Cast(normed(), name="cast_out", check=check, reads=("to",))

        return p.any(
            p.Mul(p.any(back(), normed()), p.const("gamma"), name="weight"),
            back(ends_later("Mul")),
            normed(ends_later("Cast", "Mul")),
        )

    def legal(self, m: Match, target) -> Refusal | NormFacts:
        if reason := last_axis(m.mean, "mean of squares"):
            return reason
        if not m.mean.sem.get("keepdims", True):
            return Refusal("keepdims_dropped", f"{m.mean.name}: the reduced axis is dropped "
                           "(keepdims=0), not an RMSNorm", m.mean.name)
        if reason := not_scalar_constant(m.eps, "epsilon"):
            return reason
        hidden, reason = hidden_size(m.x)
        if reason or (reason := per_feature_weights(hidden, m.gamma)):
            return reason
        return norm_facts(find_residual(m.x, m, (m.gamma,)))

    def rewrite(self, b: NodeBuilder, m: Match, facts: NormFacts):
        compute = m.cast_in.output.dtype if m.cast_in is not None else ""
        attrs = RMSNormAttrs(epsilon=float(m.eps.const.numpy().reshape(-1)[0]),
                             compute_dtype=compute or "")
        return emit_norm(b, facts, "RMSNormFused", m.x, (m.gamma,), attrs)

    def describe(self, m: Match, facts: NormFacts) -> str:
        eps = float(m.eps.const.numpy().reshape(-1)[0])
        cast = f", computed in {m.cast_in.output.dtype}" if m.cast_in is not None else ""
        return f"epsilon {eps:g}{cast}{residual_text(facts)}"


def _not_centered(mean: Node) -> Refusal | None:
    """The squares are of ``x - mean(x)``: that is a LayerNorm's variance, not an RMSNorm."""
    square = mean.inputs[0].producer
    if square is None or not square.inputs or square.inputs[0] is None:
        return None
    squared = square.inputs[0]
    node = squared.producer
    if node is not None and node.op_type == "Cast":
        node = node.input(0).producer if node.input(0) is not None else None
    mean_of = node.input(1).producer if node is not None and node.input(1) is not None else None
    if (node is not None and node.op_type == "Sub" and mean_of is not None
            and mean_of.op_type == "ReduceMean" and mean_of.input(0) is node.input(0)):
        return Refusal("centered_squares", f"averages the squares of %{squared.name} = "
                       "x - mean(x): a LayerNorm, not an RMSNorm")
    return None
