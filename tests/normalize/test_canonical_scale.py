"""canonical_scale: every spelling of a scaled product ends as Mul(MatMul(a, b), s)."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.normalize.canonical_scale import canonical_scale


def _scale(result):
    mul = result.node("Mul")
    return float(mul.inputs[1].const.numpy().reshape(()))


def test_div_by_scalar_becomes_mul_by_reciprocal(check):
    result = check("""
    g (float[2, 3] X) => (float[2, 3] Y) {
      c = Constant<value = float {8.0}>()
      Y = Div(X, c)
    }""", canonical_scale)
    assert result.ops == ["Mul"]
    assert _scale(result) == 0.125
    assert result.model.graph.outputs[0].name == "Y"


def test_mul_of_mul_combines(check):
    result = check("""
    g (float[2, 3] X) => (float[2, 3] Y) {
      a = Constant<value = float[1] {2.0}>()
      b = Constant<value = float {3.0}>()
      m = Mul(a, X)
      Y = Mul(m, b)
    }""", canonical_scale)
    assert result.ops == ["Mul"]
    assert _scale(result) == 6.0


@pytest.mark.parametrize("lhs,rhs", [
    ("qs = Mul(Q, s)", "ks = Mul(K, s)"),      # SDPA: both scaled by d**-0.25
    ("qs = Mul(Q, s2)", "ks = Identity(K)"),   # query scaled
    ("qs = Identity(Q)", "ks = Mul(s2, K)"),   # key scaled, constant first
])
def test_scale_on_q_on_k_or_both_becomes_one_form(check, lhs, rhs):
    result = check(f"""
    g (float[2, 4, 5, 8] Q, float[2, 4, 8, 5] K) => (float[2, 4, 5, 5] Y) {{
      s = Constant<value = float {{0.59460355}}>()
      s2 = Constant<value = float[1, 1] {{0.35355339}}>()
      {lhs}
      {rhs}
      Y = MatMul(qs, ks)
    }}""", canonical_scale)
    ops = [o for o in result.ops if o != "Identity"]
    assert ops == ["MatMul", "Mul"]
    mul = result.node("Mul")
    assert mul.inputs[0].producer.op_type == "MatMul"
    assert np.isclose(float(mul.inputs[1].const.numpy().reshape(-1)[0]), 0.35355339)


def test_div_after_matmul_is_the_same_form(check):
    result = check("""
    g (float[2, 5, 8] Q, float[2, 8, 5] K) => (float[2, 5, 5] Y) {
      c = Constant<value = float {2.828427}>()
      s = MatMul(Q, K)
      Y = Div(s, c)
    }""", canonical_scale)
    assert result.ops == ["MatMul", "Mul"]


def test_scaled_operand_with_another_reader_stays(check):
    result = check("""
    g (float[5, 8] Q, float[8, 5] K) => (float[5, 5] Y, float[5, 8] Z) {
      s = Constant<value = float {0.5}>()
      Z = Mul(Q, s)
      Y = MatMul(Z, K)
    }""", canonical_scale)
    assert result.unchanged


def test_non_scalar_scale_stays(check):
    result = check("""
    g (float[5, 8] Q, float[8, 5] K) => (float[5, 5] Y) {
      s = Constant<value = float[8] {1, 2, 3, 4, 5, 6, 7, 8}>()
      q = Mul(Q, s)
      Y = MatMul(q, K)
    }""", canonical_scale)
    assert result.unchanged


def test_scale_of_higher_rank_than_the_operand_stays(check):
    result = check("""
    g (float[8] Q, float[8, 5] K) => (float[1, 5] Y) {
      s = Constant<value = float[1, 1] {0.5}>()
      q = Mul(Q, s)
      Y = MatMul(q, K)
    }""", canonical_scale)
    assert result.unchanged


def test_integer_division_stays(check):
    result = check("""
    g (int64[3] X) => (int64[3] Y) {
      c = Constant<value = int64 {2}>()
      Y = Div(X, c)
    }""", canonical_scale)
    assert result.unchanged


def test_inner_mul_with_another_reader_stays(check):
    result = check("""
    g (float[3] X) => (float[3] Y, float[3] Z) {
      a = Constant<value = float {2.0}>()
      Z = Mul(X, a)
      Y = Mul(Z, a)
    }""", canonical_scale)
    assert result.unchanged
