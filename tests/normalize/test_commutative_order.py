"""commutative_order: constants go last; non-constant order is kept."""

from __future__ import annotations

import pytest

from onnxopt.normalize.commutative_order import commutative_order


@pytest.mark.parametrize("op", ["Add", "Mul", "Max", "Min"])
def test_constant_goes_second(check, op):
    result = check(f"""
    g (float[2, 3] X) => (float[2, 3] Y) {{
      c = Constant<value = float[3] {{0.5, -1.0, 2.0}}>()
      Y = {op}(c, X)
    }}""", commutative_order)
    assert [v.name for v in result.node(op).inputs] == ["X", "c"]
    assert commutative_order(result.model).changed == 0


def test_boolean_ops_and_equal(check):
    result = check("""
    g (bool[3] B, int64[3] I) => (bool[3] Y) {
      t = Constant<value = bool[3] {1, 0, 1}>()
      k = Constant<value = int64 {2}>()
      a = And(t, B)
      o = Or(t, a)
      e = Equal(k, I)
      Y = And(o, e)
    }""", commutative_order)
    assert result.changes == 3
    a, o, e, y = result.model.graph
    assert [v.name for v in a.inputs] == ["B", "t"]
    assert [v.name for v in o.inputs] == ["a", "t"]
    assert [v.name for v in e.inputs] == ["I", "k"]
    assert [v.name for v in y.inputs] == ["o", "e"]


def test_variadic_sum_keeps_its_rounding_order(check):
    """A Sum of three or more adds in the order given: reordering it would round otherwise,
    and onnxopt never changes what a model computes (two operands commute exactly)."""
    result = check("""
    g (float[3] X, float[3] Z) => (float[3] Y) {
      a = Constant<value = float {1.0}>()
      b = Constant<value = float[3] {1, 2, 3}>()
      Y = Sum(a, Z, b, X)
    }""", commutative_order)
    assert [v.name for v in result.node("Sum").inputs] == ["a", "Z", "b", "X"]
    result = check("""
    g (float[3] X) => (float[3] Y) {
      a = Constant<value = float {1.0}>()
      Y = Sum(a, X)
    }""", commutative_order)
    assert [v.name for v in result.node("Sum").inputs] == ["X", "a"]


def test_non_constant_order_and_non_commutative_ops_stay(check):
    result = check("""
    g (float[3] X, float[3] Z) => (float[3] Y) {
      c = Constant<value = float {1.0}>()
      a = Add(Z, X)
      s = Sub(c, a)
      Y = Div(c, s)
    }""", commutative_order)
    assert result.unchanged
