"""AttentionFused(x·Wq + bq, x·Wk + bk, x·Wv + bv, layout="BSH")  ->  AttentionFused(x, x, x, Wq, Wk, Wv, bq, bk, bv, projections=1)

Once the head split is absorbed (``attention_layout``), the packed Q, K and V
are the outputs of the three projections. Where each is ``MatMul(x, W)`` with a
constant weight ``[hidden, H*D]``, optionally plus a constant bias ``[H*D]``,
and nothing else reads the projection, it is absorbed too: one fused node then
stands for the block from the hidden states to the merged heads, and a kernel
that computes the projections itself (one packed QKV GEMM) can take it.
Kernels that do not see the same projections re-emitted in front of them.
Cross-attention (K and V from another hidden state than Q) is allowed: each
projection keeps its own input.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import FUSED_DOMAIN, NodeBuilder
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops.attention import attributes_with
from onnxopt.rules.base import Rule


def _projection(p: Builder, name: str):
    matmul = p.MatMul(p.var(f"{name}_x", rank=3), p.const(f"{name}_weight"), name=f"{name}_mm")
    return p.any(p.Add(matmul, p.const(f"{name}_bias"), name=f"{name}_add"), matmul)


class AttentionProjections(Rule):
    """AttentionFused(x·Wq + bq, x·Wk + bk, x·Wv + bv)  ->  AttentionFused(x, …, projections=1)"""

    name = "attention_projections"
    root = "AttentionFused"

    def pattern(self, p: Builder):
        return p.op("AttentionFused", _projection(p, "q"), _projection(p, "k"),
                    _projection(p, "v"), domain=FUSED_DOMAIN, name="attention", other_inputs=True,
                    check=_packed_inputs)

    def legal(self, m: Match, target) -> str | None:
        for name in ("q", "k", "v"):
            x, w = getattr(m, f"{name}_x"), getattr(m, f"{name}_weight")
            mm = getattr(m, f"{name}_mm")
            if mm.sem.get("transpose_a") or mm.sem.get("transpose_b"):
                return f"{mm.name}: the {name.upper()} projection multiplies a transposed operand"
            if len(w.const.shape) != 2 or not sd.same(x.shape[-1], w.const.shape[0]):
                return (f"%{w.name}: the {name.upper()} projection weight has shape "
                        f"{list(w.const.shape)}, not [hidden, heads*head_size]")
            bias = getattr(m, f"{name}_bias")
            if bias is not None and tuple(bias.const.shape) != (w.const.shape[1],):
                return (f"%{bias.name}: the {name.upper()} projection bias has shape "
                        f"{list(bias.const.shape)}, not [{w.const.shape[1]}]")
        return None

    def rewrite(self, b: NodeBuilder, m: Match, facts):
        node = m.attention
        return b.fused("AttentionFused", m.q_x, m.k_x, m.v_x, node.input(3), node.input(4),
                       m.q_weight, m.k_weight, m.v_weight, m.q_bias, m.k_bias, m.v_bias,
                       **attributes_with(node, projections=1))

    def describe(self, m: Match, facts) -> str:
        biased = sum(getattr(m, f"{n}_bias") is not None for n in "qkv")
        return f"Q/K/V projections absorbed ({biased} with bias)"


def _packed_inputs(node) -> str | None:
    if node.attr("layout", "BNSH") != "BSH":
        return "Q, K and V are split into heads outside the node (layout BNSH)"
    if node.attr("projections", 0):
        return "the projections are already absorbed"
    return None
