"""Transpose(Reshape(x, [B,S,H,D])) → AttentionFused → Transpose → Reshape([B,S,H*D])
->  AttentionFused(x_q, x_k, x_v, layout="BSH", output_layout="BSH")

After the attention rule, one fused node stands for softmax(QKᵀ)V, but the
model still splits the projections into heads before it and merges the heads
after it. These two rules absorb that layout work into the fused node, so one
node stands for the whole block from the Q/K/V projections to the output
projection, and a kernel that takes the packed ``[B, S, H*D]`` form natively
(ONNX Runtime's MultiHeadAttention, FlashAttention-style kernels) needs no
layout conversion at all:

- inputs: when Q, K and V all come from ``Transpose([0,2,1,3])`` of a
  ``Reshape`` that splits ``[B, S, H*D]`` into ``[B, S, H, D]``;
- output: when the output goes through ``Transpose([0,2,1,3])`` to a
  ``Reshape`` that merges ``[B, S, H, Dv]`` into ``[B, S, H*Dv]``.

The two are independent: a model that applies rotary embeddings to Q and K
after the split (LLaMA) keeps BNSH inputs but still absorbs the output merge.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import FUSED_DOMAIN, NodeBuilder
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops.attention import attributes_with
from onnxopt.rules.base import Rule

HEAD_PERM = (0, 2, 1, 3)


def _split(p: Builder, name: str):
    return p.Transpose(p.Reshape(p.var(f"{name}_bsh", rank=3), p.var(f"{name}_split_shape"),
                                 name=f"{name}_reshape", reads=("allowzero",)),
                       attrs={"perm": HEAD_PERM}, name=f"{name}_split")


def _splits_heads(x, y, what: str) -> str | None:
    """``y = Reshape(x)`` turns ``[B, S, H*D]`` into ``[B, S, H, D]``."""
    if x.shape is None or y.shape is None or len(y.shape) != 4:
        return f"%{y.name}: the {what} head split has unknown shapes"
    b, s, hd = x.shape
    if not (sd.same(y.shape[0], b) and sd.same(y.shape[1], s)
            and sd.same(sd.mul(y.shape[2], y.shape[3]), hd)):
        return f"%{y.name}: {list(x.shape)} → {list(y.shape)} is not a head split of the {what}"
    return None


class AttentionInputLayout(Rule):
    """Transpose(Reshape(x, [B,S,H,D])) for Q, K, V  ->  AttentionFused(x…, layout="BSH")"""

    name = "attention_layout"
    root = "AttentionFused"

    def pattern(self, p: Builder):
        return p.op("AttentionFused", _split(p, "q"), _split(p, "k"), _split(p, "v"),
                    domain=FUSED_DOMAIN, name="attention", other_inputs=True,
                    check=lambda n: None if n.attr("layout", "BNSH") == "BNSH"
                    else "the inputs are already packed")

    def legal(self, m: Match, target) -> str | None:
        for name in ("q", "k", "v"):
            reason = _splits_heads(getattr(m, f"{name}_bsh"), getattr(m, f"{name}_reshape").output,
                                   name.upper())
            if reason:
                return reason
        return None

    def rewrite(self, b: NodeBuilder, m: Match, facts):
        node = m.attention
        v_head = m.v_reshape.output.shape[3]
        attrs = attributes_with(node, layout="BSH",
                            v_head_size=v_head if isinstance(v_head, int) else 0)
        out = b.fused("AttentionFused", m.q_bsh, m.k_bsh, m.v_bsh, *node.inputs[3:], **attrs)
        return out

    def describe(self, m: Match, facts) -> str:
        return "head split of Q, K and V absorbed"


class AttentionOutputLayout(Rule):
    """Reshape(Transpose(AttentionFused(…)), [B,S,H*Dv])  ->  AttentionFused(…, output_layout="BSH")"""

    name = "attention_layout"
    root = "Reshape"

    def pattern(self, p: Builder):
        attention = p.op("AttentionFused", p.var("q"), p.var("k"), p.var("v"), domain=FUSED_DOMAIN,
                         other_inputs=True,
                         name="attention", check=lambda n: None if n.attr(
                             "output_layout", "BNSH") == "BNSH" else "the output is already merged")
        return p.Reshape(p.Transpose(attention, attrs={"perm": HEAD_PERM}, name="merge"),
                         p.var("merge_shape"), name="merge_reshape", reads=("allowzero",))

    def legal(self, m: Match, target) -> str | None:
        t, r = m.merge.output.shape, m.merge_reshape.output.shape
        if t is None or r is None or len(t) != 4:
            return f"%{m.merge_reshape.output.name}: the head merge has unknown shapes"
        if len(r) != 3:
            return (f"%{m.merge_reshape.output.name}: {list(t)} → {list(r)} is not a head merge "
                    "into [B, S, H*Dv]")
        if not (sd.same(r[0], t[0]) and sd.same(r[1], t[1]) and sd.same(r[2], sd.mul(t[2], t[3]))):
            return (f"%{m.merge_reshape.output.name}: {list(t)} → {list(r)} is not a head merge")
        return None

    def rewrite(self, b: NodeBuilder, m: Match, facts):
        node = m.attention
        dv = m.merge.output.shape[3]
        attrs = attributes_with(node, output_layout="BSH",
                            v_head_size=dv if isinstance(dv, int) else node.attr("v_head_size", 0))
        return b.fused("AttentionFused", *node.inputs, **attrs)

    def describe(self, m: Match, facts) -> str:
        return "head merge of the output absorbed"
