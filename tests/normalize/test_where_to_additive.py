"""where_to_additive: Where(cond, x, -big) before a Softmax becomes x + Where(cond, 0, -big)."""

from __future__ import annotations

import pytest

from onnxopt.normalize.where_to_additive import where_to_additive


@pytest.mark.parametrize("fill", ["-1e30", "-3.4028235e38", "-inf"])
def test_masked_fill_before_softmax(check, fill):
    result = check(f"""
    g (float[2, 4, 4] S, bool[2, 1, 4] M) => (float[2, 4, 4] Y) {{
      c = Constant<value = float {{{fill}}}>()
      w = Where(M, S, c)
      Y = Softmax(w)
    }}""", where_to_additive)
    assert result.ops == ["Where", "Add", "Softmax"]
    mask = result.node("Where")
    assert mask.inputs[0].name == "M" and float(mask.inputs[1].const.numpy()) == 0.0
    add = result.node("Add")
    assert add.inputs[0].name == "S" and add.inputs[1] is mask.output
    assert where_to_additive(result.model).changed == 0


def test_through_adds_and_with_the_fill_first(check):
    result = check("""
    g (float[2, 4, 4] S, bool[2, 1, 4] M, float[4, 4] B) => (float[2, 4, 4] Y) {
      c = Constant<value = float[1] {-1e38}>()
      w = Where(M, c, S)
      b = Add(B, w)
      Y = Softmax(b)
    }""", where_to_additive)
    assert result.ops == ["Not", "Where", "Add", "Add", "Softmax"]


def test_double_negation_is_not_built(check):
    result = check("""
    g (float[2, 4] S, bool[2, 4] K) => (float[2, 4] Y) {
      c = Constant<value = float {-inf}>()
      n = Not(K)
      w = Where(n, c, S)
      Y = Softmax(w)
    }""", where_to_additive)
    assert result.ops == ["Where", "Add", "Softmax"]
    assert result.node("Where").inputs[0].name == "K"


def test_fill_not_large_enough_is_refused(check):
    result = check("""
    g (float[2, 4] S, bool[2, 4] M) => (float[2, 4] Y) {
      c = Constant<value = float {-10000.0}>()
      w = Where(M, S, c)
      Y = Softmax(w)
    }""", where_to_additive)
    assert result.unchanged


def test_value_read_outside_softmax_is_refused(check):
    result = check("""
    g (float[2, 4] S, bool[2, 4] M) => (float[2, 4] Y, float[2, 4] Z) {
      c = Constant<value = float {-1e30}>()
      w = Where(M, S, c)
      Y = Softmax(w)
      Z = Neg(w)
    }""", where_to_additive)
    assert result.unchanged


def test_not_reaching_a_softmax_is_refused(check):
    result = check("""
    g (float[2, 4] S, bool[2, 4] M) => (float[2, 4] Y) {
      c = Constant<value = float {-1e30}>()
      w = Where(M, S, c)
      Y = Exp(w)
    }""", where_to_additive)
    assert result.unchanged


def test_additive_mask_already_is_left_alone(check):
    result = check("""
    g (float[2, 4] S, bool[2, 4] M) => (float[2, 4] Y) {
      c = Constant<value = float {-1e30}>()
      z = Constant<value = float {0.0}>()
      w = Where(M, z, c)
      a = Add(S, w)
      Y = Softmax(a)
    }""", where_to_additive)
    assert result.unchanged


def test_non_scalar_fill_is_refused(check):
    result = check("""
    g (float[2, 4] S, bool[2, 4] M) => (float[2, 4] Y) {
      c = Constant<value = float[4] {-1e30, -1e30, -1e30, -1e30}>()
      w = Where(M, S, c)
      Y = Softmax(w)
    }""", where_to_additive)
    assert result.unchanged
