"""(x - mean(x)) / sqrt(var(x) + ε) · γ + β  ->  ai.onnxopt.LayerNormFused(x, γ, β, residual?)

Two spellings reach the ``layer_norm`` family, a rule each: the ONNX
``LayerNormalization`` op (opset 17+, what both PyTorch exporters write today;
rule ``layer_norm_op``) and its decomposition ``ReduceMean → Sub →
Pow(2)|Mul(d, d) → ReduceMean → Add(ε) → Sqrt → Div|Mul(Reciprocal) → Mul(γ) →
Add(β)`` (rule ``layer_norm``), possibly wrapped in float-to-float Casts (a
float16 model computing the norm in float32). Normalization may have removed an
all-ones γ or all-zeros β, so the decomposed norm ends at the ``Add``, the
``Mul``, a ``Cast`` or the division: one pattern with a root for each.

A residual ``Add(a, b)`` feeding the norm is folded in; when its sum is also
read elsewhere the fused op returns it as a second output.
"""

from __future__ import annotations

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.legality.predicates import last_axis, not_scalar_constant
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops import LayerNormAttrs
from onnxopt.refusal import Refusal
from onnxopt.rules._norm import (
    REDUCE_READS,
    NormFacts,
    emit_norm,
    ends_later,
    find_residual,
    hidden_size,
    norm_facts,
    per_feature_weights,
    residual_text,
)
from onnxopt.rules.base import Rule


def _compute_dtype(m: Match) -> str:
    if m.cast_in is None:
        return ""
    return m.cast_in.output.dtype or ""


class LayerNorm(Rule):
    """(x - mean(x)) / sqrt(var(x) + ε) · γ + β  ->  ai.onnxopt.LayerNormFused(x, γ, β)"""

    name = "layer_norm"
    # Once all-ones weights and zero biases are gone, the decomposed form ends at the bias Add,
    # the weight Mul, d / std (or d * 1/std), or the Cast back to the input type.
    root = ("Add", "Mul", "Div", "Cast")

    def pattern(self, p: Builder):
        x = p.var("x", dtype=FLOAT_TYPES)
        xin = p.optional(p.Cast(x, name="cast_in", reads=("to",)), x)
        d = p.Sub(xin, p.ReduceMean(xin, p.maybe(p.const()), name="mean", reads=REDUCE_READS), name="centered")
        var = p.ReduceMean(p.any(p.Pow(d, p.const(value=2.0)), p.Mul(d, d)),
                           p.maybe(p.const()), name="var", reads=REDUCE_READS)
        std = p.Sqrt(p.Add(var, p.var("eps")), name="sqrt")

        def normed(check=None):
            return p.any(p.Div(d, std, name="normed", check=check),
                         p.Mul(d, p.Reciprocal(std), name="normed", check=check))

        def back(check=None):
            return p.Cast(normed(), name="cast_out", check=check, reads=("to",))

        gamma, beta = p.const("gamma"), p.const("beta")
        inner = p.any(back(), normed())
        return p.any(
            p.Add(p.Mul(inner, gamma, name="weight"), beta, name="bias"),
            p.Add(inner, beta, name="bias"),
            p.Mul(inner, gamma, name="weight", check=ends_later("Add")),
            back(ends_later("Mul", "Add")),
            normed(ends_later("Cast", "Mul", "Add")),
        )

    def legal(self, m: Match, target) -> Refusal | NormFacts:
        mean_axes, var_axes = m.mean.sem.get("axes"), m.var.sem.get("axes")
        if mean_axes != var_axes:
            return Refusal("axes_differ", f"{m.var.name}: the mean is over axis "
                           f"{_axes(mean_axes)}, the variance over axis {_axes(var_axes)}",
                           m.var.name)
        if reason := last_axis(m.mean, "mean"):
            return reason
        for node in (m.mean, m.var):
            if not node.sem.get("keepdims", True):
                return Refusal("keepdims_dropped", f"{node.name}: the reduced axis is dropped "
                               "(keepdims=0), not a LayerNorm", node.name)
        if reason := not_scalar_constant(m.eps, "epsilon"):
            return reason
        hidden, reason = hidden_size(m.x)
        if reason or (reason := per_feature_weights(hidden, m.gamma, m.beta)):
            return reason
        return norm_facts(find_residual(m.x, m, (m.gamma, m.beta)))

    def rewrite(self, b: NodeBuilder, m: Match, facts: NormFacts):
        eps = float(m.eps.const.numpy().reshape(-1)[0])
        attrs = LayerNormAttrs(epsilon=eps, axis=-1, compute_dtype=_compute_dtype(m))
        return emit_norm(b, facts, "LayerNormFused", m.x, (m.gamma, m.beta), attrs)

    def describe(self, m: Match, facts: NormFacts) -> str:
        eps = float(m.eps.const.numpy().reshape(-1)[0])
        return f"epsilon {eps:g}{residual_text(facts)}"


class LayerNormOp(Rule):
    """LayerNormalization(x, γ, β)  ->  ai.onnxopt.LayerNormFused(x, γ, β, residual?)"""

    name = "layer_norm_op"
    family = "layer_norm"
    root = "LayerNormalization"

    def pattern(self, p: Builder):
        return p.LayerNormalization(p.var("x", dtype=FLOAT_TYPES), p.var("gamma"),
                                    p.maybe(p.var("beta")), name="ln",
                                    reads=("axis", "epsilon", "stash_type"))

    def legal(self, m: Match, target) -> Refusal | NormFacts:
        ln, x = m.ln, m.x
        rank = x.rank
        axis = ln.attr("axis", -1)
        if rank is None:
            return Refusal("rank_unknown", f"%{x.name}: the rank of the normalised input is "
                           "unknown", f"%{x.name}")
        if (axis + rank if axis < 0 else axis) != rank - 1:
            return Refusal("not_last_axis", f"{ln.name}: normalizes over axes "
                           f"{axis}..{rank - 1}, not the last axis ({rank - 1}) alone", ln.name)
        if any(o.num_uses or o.is_graph_output for o in ln.outputs[1:]):
            return Refusal("statistics_read", f"{ln.name}: its Mean/InvStdDev outputs are "
                           "read, which the fused op does not give", ln.name)
        hidden, reason = hidden_size(x)
        if reason or (reason := per_feature_weights(hidden, m.gamma, m.beta)):
            return reason
        return norm_facts(find_residual(x, m, (m.gamma, m.beta)))

    def rewrite(self, b: NodeBuilder, m: Match, facts: NormFacts):
        x = m.x
        stash = m.ln.attr("stash_type", 1)
        compute = "float32" if stash == 1 else x.dtype
        attrs = LayerNormAttrs(epsilon=float(m.ln.attr("epsilon", 1e-5)), axis=-1,
                               compute_dtype="" if compute == x.dtype else compute)
        return emit_norm(b, facts, "LayerNormFused", x, (m.gamma, m.beta), attrs)

    def describe(self, m: Match, facts: NormFacts) -> str:
        return (f"LayerNormalization, epsilon {m.ln.attr('epsilon', 1e-5):g}"
                f"{residual_text(facts)}")


def _axes(axes) -> list | str:
    return list(axes) if isinstance(axes, (tuple, list)) else "all" if axes is None else axes
