"""rotary: LLaMA's rotate-half RoPE fuses with the model's own cos/sin tables; slices that are
not the two halves, or tables that would enlarge x, are refused with the reason."""

from __future__ import annotations

import pytest

from onnxopt.rules.rotary import Rotary

ROPE = """
g (float[{x}] q, float[{c}] cos, float[{c}] sin) => (float[{x}] y)
  <int64[1] s0 = {{0}}, int64[1] s8 = {{8}}, int64[1] end = {{9223372036854775807}},
   int64[1] ax = {{{axis}}}, int64[1] one = {{1}}, int64[1] step = {{{step}}}> {{
    qc = Mul (q, cos)
    x1 = Slice (q, s0, s8, ax, step)
    x2 = Slice (q, s8, end, ax, one)
    n = Neg ({neg})
    r = Concat <axis = {cat}> (n, {other})
    rs = Mul (r, sin)
    y = Add (qc, rs)
}}
"""


def rope(x="batch, 4, seq, 16", c="1, 1, seq, 16", axis=-1, step=1, neg="x2", other="x1",
         cat=-1) -> str:
    return ROPE.format(x=x, c=c, axis=axis, step=step, neg=neg, other=other, cat=cat)


@pytest.mark.parametrize("axis", [-1, 3])
def test_rotate_half_fuses_and_computes_the_same(fuse_text, optimize_text, axis):
    fused = fuse_text(rope(axis=axis), [Rotary()])
    (node,) = fused.nodes("RotaryFused")
    assert [v.name for v in node.inputs] == ["q", "cos", "sin"]
    assert (node.attr("interleaved"), node.attr("rotary_dim")) == (0, 0)
    assert set(fused.ops) == {"RotaryFused"}
    _result, report = optimize_text(rope(axis=axis))
    assert report.ok, report.to_json()


def _refusal(fused, code: str) -> str:
    """The one refusal's sentence, once its code is ``code``."""
    (reason,) = fused.reasons("rotary")
    assert fused.codes("rotary") == [code]
    assert not fused.nodes("RotaryFused")
    return reason


@pytest.mark.parametrize("kw, reason, code", [
    ({"neg": "x1", "other": "x2"}, ("Slice_1: takes [8:16] of the last axis, not the half [0:8] of "
                                 "the last axis"), "slice_not_half"),
    ({"step": 2}, ("Slice: takes [0:8] with step 2 of the last axis, not the half [0:8] of the "
                   "last axis"), "slice_not_half"),
    ({"axis": 2, "x": "batch, 4, 16, 16", "c": "1, 1, 16, 16"},
     "Slice: takes [0:8] of axis 2, not the half [0:8] of the last axis", "slice_not_half"),
    ({"cat": 2}, "Concat: concatenates on axis 2, not the last axis", "not_last_axis"),
    ({"x": "batch, 4, seq, d", "c": "1, 1, seq, d"}, "%q: the head size is not known",
     "head_size_unknown"),
    ({"x": "1, 4, seq, 16", "c": "2, 4, seq, 16"},
     "%cos: a rotary table of shape [2, 4, 'seq', 16] does not broadcast to x [1, 4, 'seq', 16]",
     "table_not_broadcast"),
])
def test_refusals(fuse_text, kw, reason, code):
    assert _refusal(fuse_text(rope(**kw), [Rotary()]), code) == reason


def test_tables_of_different_shapes(fuse_text):
    text = rope().replace("float[1, 1, seq, 16] sin", "float[seq, 16] sin")
    assert _refusal(fuse_text(text, [Rotary()]), "table_shapes_differ") == (
        "%sin: sin has shape ['seq', 16], cos [1, 1, 'seq', 16]")
