"""softmax_canonical: hand-written softmax becomes Softmax(axis) <stable>; refusals change nothing."""

from __future__ import annotations

import pytest

from onnxopt.normalize.softmax_canonical import softmax_canonical

STABLE = """
g (float[2, 3, 5] X) => (float[2, 3, 5] Y) {{
  ax = Constant<value = int64[1] {{{axis}}}>()
  m = ReduceMax<keepdims = 1>(X, ax)
  d = Sub(X, m)
  e = Exp(d)
  s = ReduceSum<keepdims = {keepdims}>(e, ax)
  Y = Div(e, s)
}}"""


@pytest.mark.parametrize("axis", [-1, 2, 1])
def test_stable_form(check, axis):
    result = check(STABLE.format(axis=axis, keepdims=1), softmax_canonical)
    assert result.ops == ["Softmax"]
    sm = result.node("Softmax")
    assert sm.sem["stable"] is True
    assert sm.attr("axis") == (axis if axis >= 0 else axis + 3)
    assert result.model.graph.outputs[0].name == "Y"


def test_unstable_form(check):
    result = check("""
    g (float[2, 5] X) => (float[2, 5] Y) {
      e = Exp(X)
      ax = Constant<value = int64[1] {-1}>()
      s = ReduceSum<keepdims = 1>(e, ax)
      Y = Div(e, s)
    }""", softmax_canonical)
    assert result.ops == ["Softmax"]
    assert result.node("Softmax").sem["stable"] is True


def test_opset_13_attribute_axes(check):
    result = check("""
    g (float[2, 5] X) => (float[2, 5] Y) {
      m = ReduceMax<axes = [1], keepdims = 1>(X)
      d = Sub(X, m)
      e = Exp(d)
      ax = Constant<value = int64[1] {1}>()
      s = ReduceSum<keepdims = 1>(e, ax)
      Y = Div(e, s)
    }""", softmax_canonical, opset=13)
    assert result.ops == ["Softmax"]


def test_existing_softmax_is_marked_stable_once(check):
    result = check("""
    g (float[2, 5] X) => (float[2, 5] Y) { Y = Softmax(X) }""", softmax_canonical)
    assert result.changes == 1 and result.node("Softmax").sem["stable"] is True
    assert softmax_canonical(result.model).changed == 0


def test_keepdims_zero_is_refused(check):
    result = check(STABLE.format(axis=-1, keepdims=0), softmax_canonical, run=False)
    assert result.unchanged


def test_other_reader_of_an_intermediate_is_refused(check):
    result = check("""
    g (float[2, 5] X) => (float[2, 5] Y, float[2, 5] E) {
      ax = Constant<value = int64[1] {-1}>()
      m = ReduceMax<keepdims = 1>(X, ax)
      d = Sub(X, m)
      E = Exp(d)
      s = ReduceSum<keepdims = 1>(E, ax)
      Y = Div(E, s)
    }""", softmax_canonical)
    assert result.unchanged


def test_other_reader_of_the_max_is_refused(check):
    result = check("""
    g (float[2, 5] X) => (float[2, 5] Y, float[2, 1] M) {
      ax = Constant<value = int64[1] {-1}>()
      M = ReduceMax<keepdims = 1>(X, ax)
      d = Sub(X, M)
      e = Exp(d)
      s = ReduceSum<keepdims = 1>(e, ax)
      Y = Div(e, s)
    }""", softmax_canonical)
    assert result.unchanged


def test_reductions_over_different_axes_are_refused(check):
    result = check("""
    g (float[4, 5] X) => (float[4, 5] Y) {
      a0 = Constant<value = int64[1] {0}>()
      a1 = Constant<value = int64[1] {1}>()
      m = ReduceMax<keepdims = 1>(X, a0)
      d = Sub(X, m)
      e = Exp(d)
      s = ReduceSum<keepdims = 1>(e, a1)
      Y = Div(e, s)
    }""", softmax_canonical)
    assert result.unchanged


def test_sum_over_two_axes_is_refused(check):
    result = check("""
    g (float[4, 5] X) => (float[4, 5] Y) {
      e = Exp(X)
      ax = Constant<value = int64[2] {0, 1}>()
      s = ReduceSum<keepdims = 1>(e, ax)
      Y = Div(e, s)
    }""", softmax_canonical)
    assert result.unchanged


def test_max_of_another_tensor_is_the_unstable_form_of_the_difference(check):
    result = check("""
    g (float[4, 5] X, float[4, 5] Z) => (float[4, 5] Y) {
      ax = Constant<value = int64[1] {1}>()
      m = ReduceMax<keepdims = 1>(Z, ax)
      d = Sub(X, m)
      e = Exp(d)
      s = ReduceSum<keepdims = 1>(e, ax)
      Y = Div(e, s)
    }""", softmax_canonical)
    assert result.ops == ["ReduceMax", "Sub", "Softmax"]
    assert result.node("Softmax").inputs[0].name == "d"
