"""Reshape(Reshape(x, s1), s2) -> Reshape(x, s2), unless s2 reads the middle shape (a 0)."""

from __future__ import annotations

from onnxopt.normalize.merge_reshapes import merge_reshapes

TWICE = """
g (float[B, S, 64] x) => (float[B, S, 64] y) {{
    s1 = Constant <value = int64[4] {{0, 0, 4, 16}}> ()
    r = Reshape (x, s1)
    s2 = Constant <value = int64[3] {target}> ()
    y = Reshape (r, s2)
}}
"""


def _ops(result):
    return [n.op_type for n in result.model.graph]


def test_two_reshapes_merge(check):
    result = check(TWICE.format(target="{2, -1, 64}"), merge_reshapes, dim=2)
    assert result.changes == 1 and _ops(result) == ["Reshape"]


def test_a_zero_copying_a_dim_the_middle_shares_with_x_merges(check):
    result = check(TWICE.format(target="{0, 0, 64}"), merge_reshapes)
    assert result.changes == 1 and _ops(result) == ["Reshape"]


def test_a_zero_copying_a_dim_the_middle_changed_keeps_both(check):
    text = TWICE.replace("int64[4] {{0, 0, 4, 16}}", "int64[3] {{0, -1, 16}}").format(
        target="{0, 0, 16}").replace("=> (float[B, S, 64] y)", "=> (float[B, ?, 16] y)")
    result = check(text, merge_reshapes)
    assert result.changes == 0 and _ops(result) == ["Reshape", "Reshape"]


def test_a_middle_value_with_another_reader_keeps_both(check):
    text = TWICE.format(target="{2, -1, 64}").replace(
        "=> (float[B, S, 64] y)", "=> (float[B, S, 64] y, float[B, S, 4, 16] r)")
    result = check(text, merge_reshapes, dim=2)
    assert result.changes == 0
