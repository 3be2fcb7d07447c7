"""Attention whose probabilities are quantized (QDQ): recognised, and refused with the reason.

A QDQ-quantized model (ONNX Runtime's ``quantize_static`` in QDQ format, a quantized Whisper or
BERT encoder) puts ``QuantizeLinear → DequantizeLinear`` around every activation a MatMul
reads, the attention probabilities included::

    DQ(Q(q)) · DQ(Q(kᵀ)) → [·scale, + mask, each through Q/DQ] → Softmax
        → QuantizeLinear → DequantizeLinear → MatMul(·, DQ(Q(v)))

Each pair is a rounding the model performs: softmax's output is rounded to 8 bits before it
multiplies V. A fused float attention kernel computes the probabilities in float and never
rounds them, so its output would differ by about the quantization error — not the model's
numbers. Nor can the pairs stay outside a float core: the rounding sits between the softmax
and ·V, inside any attention kernel. So this rule matches ``Softmax → Q → DQ → MatMul`` and
refuses it with a code of its own (``quantized_probabilities``), rather than the block going
unreported ("no candidate"). Attention that is quantized only at its inputs (no
QuantizeLinear between the softmax and ·V) is rule ``attention``'s: its Q, K and V are the
DequantizeLinear outputs, which it reads as they are, every Q/DQ pair left outside.
"""

from __future__ import annotations

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES
from onnxopt.ir.value import Value
from onnxopt.match.pattern import Builder, Match
from onnxopt.refusal import Refusal
from onnxopt.rules.base import Facts, Rule

QUANTIZED_PROBABILITIES = "quantized_probabilities"
# Between the scores' MatMul and the Softmax: scaling, masking, and their Q/DQ pairs.
SCORE_STEPS = frozenset({"DequantizeLinear", "QuantizeLinear", "Add", "Mul", "Div", "Sub",
                         "Where", "Cast"})
MAX_STEPS = 12


def scores_matmul(scores: Value):
    """The MatMul the softmax's input is computed from (through scaling, masking and Q/DQ
    pairs), or None."""
    v = scores
    for _ in range(MAX_STEPS):
        node = v.producer
        if node is None:
            return None
        if node.op_type == "MatMul":
            return node
        if node.op_type not in SCORE_STEPS:
            return None
        inputs = [x for x in node.inputs if x is not None and x.const is None]
        if node.op_type == "Where":
            inputs = inputs[-2:]
        if not inputs:
            return None
        v = inputs[0] if node.op_type in ("DequantizeLinear", "QuantizeLinear") else max(
            inputs, key=lambda x: len(x.shape or ()))
    return None


def _reads_rounded_softmax(node) -> Refusal | None:
    """Checked at the root first, so that the many MatMuls of a QDQ model that read other
    rounded values are no candidate at all (not a partial attention each)."""
    x = node.inputs[0] if node.inputs else None
    for op in ("DequantizeLinear", "QuantizeLinear", "Softmax"):
        if x is None or x.producer is None or x.producer.op_type != op:
            return Refusal("not_rounded_probabilities", f"{node.name}: does not read "
                           "DequantizeLinear(QuantizeLinear(Softmax))", node.name)
        x = x.producer.inputs[0] if x.producer.inputs else None
    return None


class QuantizedAttention(Rule):
    """Softmax(Q·Kᵀ …) → QuantizeLinear → DequantizeLinear → ·V: refused (rounded probabilities)"""

    name = "quantized_attention"
    family = "attention"
    root = "MatMul"

    def pattern(self, p: Builder):
        softmax = p.Softmax(p.var("scores", dtype=FLOAT_TYPES), name="softmax")
        rounded = p.DequantizeLinear(p.QuantizeLinear(softmax, p.var("q_scale"),
                                                      p.var("q_zero"), name="quantize"),
                                     p.var("dq_scale"), p.var("dq_zero"), name="dequantize")
        return p.MatMul(rounded, p.var("v"), name="pv", check=_reads_rounded_softmax)

    def legal(self, m: Match, target) -> Refusal:
        qk = scores_matmul(m.scores)
        where = f"{m.softmax.name}" if qk is None else f"{qk.name} → {m.softmax.name}"
        return Refusal(QUANTIZED_PROBABILITIES,
                       f"{where}: QuantizeLinear {m.quantize.name} rounds the attention "
                       "probabilities before ·V (QDQ); a float attention kernel would not round "
                       "them, so the block stays as quantized", m.softmax.name)

    def rewrite(self, b: NodeBuilder, m: Match, facts: Facts | None):  # pragma: no cover
        raise AssertionError("quantized attention is always refused")

    def describe(self, m: Match, facts: Facts | None) -> str:  # pragma: no cover
        return "quantized attention"
