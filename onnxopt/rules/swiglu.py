"""silu(gate) · up  ->  ai.onnxopt.SwiGLUFused(gate, up)

The gated MLP of LLaMA and Mistral: ``down(silu(gate(h)) · up(h))``. The SiLU
is usually fused first (the worklist reaches it earlier in the graph), so the
pattern reads either ``SiluFused(gate)`` or the raw ``gate · sigmoid(gate)``.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import FUSED_DOMAIN, NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops import SiluAttrs, SwiGLUAttrs
from onnxopt.refusal import Refusal
from onnxopt.rules.base import Rule


class SwiGLU(Rule):
    """silu(gate) · up  ->  ai.onnxopt.SwiGLUFused(gate, up)"""

    name = "swiglu"
    root = "Mul"

    def pattern(self, p: Builder):
        gate = p.var("gate", dtype=FLOAT_TYPES)
        silu = p.any(p.op("SiluFused", gate, domain=FUSED_DOMAIN, name="silu",
                          check=_plain_silu),
                     p.Mul(gate, p.Sigmoid(gate), name="silu"))
        return p.Mul(silu, p.var("up", dtype=FLOAT_TYPES))

    def legal(self, m: Match, target) -> Refusal | None:
        gate, up = m.gate, m.up
        at = f"%{up.name}"
        if up.const is not None:
            return Refusal("up_is_constant", f"{at}: the up projection is a constant, so this "
                           "is SiLU times a weight", at)
        if gate.dtype != up.dtype:
            return Refusal("dtypes_differ", f"{at}: up is {up.dtype}, gate {gate.dtype}", at)
        if (gate.shape is None or up.shape is None or len(gate.shape) != len(up.shape)
                or not all(sd.same(a, b) for a, b in zip(gate.shape, up.shape))):
            return Refusal("shapes_differ", f"{at}: up has shape {_shape(up.shape)}, gate "
                           f"{_shape(gate.shape)}; SwiGLU needs equal shapes", at)
        return None

    def rewrite(self, b: NodeBuilder, m: Match, facts):
        return b.fused("SwiGLUFused", m.gate, m.up, attrs=SwiGLUAttrs())

    def describe(self, m: Match, facts) -> str:
        return "after SiluFused" if m.silu.domain == FUSED_DOMAIN else "raw x·sigmoid(x)"


def _plain_silu(node) -> Refusal | None:
    alpha = SiluAttrs.of(node).alpha
    return None if alpha == 1.0 else Refusal("not_plain_silu",
                                             f"sigmoid scale alpha={alpha:g}: not SiLU")


def _shape(shape) -> str:
    return "unknown" if shape is None else str(list(shape))
