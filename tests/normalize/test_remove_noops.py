"""remove_noops: nodes that compute nothing are bypassed; anything that could broadcast stays."""

from __future__ import annotations

import pytest

from onnxopt.normalize.remove_noops import remove_noops


def test_identity_chain(check):
    result = check("""
    g (float[2] X) => (float[2] Y) {
      a = Identity(X)
      b = Identity(a)
      Y = Neg(b)
    }""", remove_noops)
    assert result.ops == ["Neg"]
    assert result.changes == 2


def test_identity_as_graph_output_keeps_the_output_name(check):
    result = check("""
    g (float[2] X) => (float[2] Y) {
      a = Neg(X)
      Y = Identity(a)
    }""", remove_noops)
    assert result.ops == ["Neg"]
    assert result.model.graph.outputs[0].name == "Y"


def test_identity_of_a_graph_input_to_a_graph_output_stays(check):
    result = check("g (float[2] X) => (float[2] Y) { Y = Identity(X) }", remove_noops)
    assert result.unchanged


@pytest.mark.parametrize("dropout", [
    "d = Dropout(X)",
    "d, m = Dropout(X, r)",
    "d = Dropout(X, r, f)",
])
def test_inference_dropout(check, dropout):
    result = check(f"""
    g (float[2, 3] X) => (float[2, 3] Y) {{
      r = Constant<value = float {{0.5}}>()
      f = Constant<value = bool {{0}}>()
      {dropout}
      Y = Neg(d)
    }}""", remove_noops)
    assert result.ops == ["Neg"]


def test_dropout_whose_mask_is_read_stays(check):
    result = check("""
    g (float[2, 3] X) => (float[2, 3] Y, bool[2, 3] M) {
      d, M = Dropout(X)
      Y = Neg(d)
    }""", remove_noops)
    assert result.unchanged


def test_dropout_in_training_mode_stays(check):
    result = check("""
    g (float[2, 3] X, bool T) => (float[2, 3] Y) {
      d = Dropout(X, , T)
      Y = Neg(d)
    }""", remove_noops, run=False)
    assert result.unchanged


def test_cast_to_own_type_goes_other_casts_stay(check):
    result = check("""
    g (float[2] X) => (int64[2] Y) {
      a = Cast<to = 1>(X)
      Y = Cast<to = 7>(a)
    }""", remove_noops)
    assert result.ops == ["Cast"]
    assert result.node("Cast").attr("to") == 7


@pytest.mark.parametrize("op,const,order", [
    ("Mul", "float {1.0}", "xc"), ("Mul", "float[1] {1.0}", "cx"), ("Add", "float {0.0}", "cx"),
    ("Add", "float[1, 1] {-0.0}", "xc"), ("Sub", "float {0.0}", "xc"), ("Div", "float {1.0}", "xc"),
])
def test_arithmetic_identity(check, op, const, order):
    args = "X, c" if order == "xc" else "c, X"
    result = check(f"""
    g (float[N, 4] X) => (float[N, 4] Y) {{
      c = Constant<value = {const}>()
      a = {op}({args})
      Y = Neg(a)
    }}""", remove_noops)
    assert result.ops == ["Neg"]


@pytest.mark.parametrize("op,const,order,why", [
    ("Add", "float[1, 1, 1] {0.0}", "xc", "rank above x: would broadcast"),
    ("Sub", "float {0.0}", "cx", "0 - x is not x"),
    ("Div", "float {1.0}", "cx", "1 / x is not x"),
    ("Mul", "float {2.0}", "xc", "not the identity element"),
    ("Mul", "float[2] {1.0, 2.0}", "xc", "not all ones"),
])
def test_arithmetic_that_is_not_a_noop_stays(check, op, const, order, why):
    args = "X, c" if order == "xc" else "c, X"
    x_shape = "float[3, 2]"
    out_shape = "float[1, 3, 2]" if "1, 1, 1" in const else x_shape
    result = check(f"""
    g ({x_shape} X) => ({out_shape} Y) {{
      c = Constant<value = {const}>()
      a = {op}({args})
      Y = Neg(a)
    }}""", remove_noops)
    assert result.unchanged, why


def test_identity_transpose(check):
    result = check("""
    g (float[2, 3] X) => (float[2, 3] Y) {
      a = Transpose<perm = [0, 1]>(X)
      b = Transpose<perm = [1, 0]>(a)
      Y = Transpose<perm = [1, 0]>(b)
    }""", remove_noops)
    assert result.ops == ["Transpose", "Transpose"]


def test_reshape_and_expand_to_the_same_shape(check):
    result = check("""
    g (float[2, 3] X) => (float[3, 2] Y) {
      s = Constant<value = int64[2] {2, 3}>()
      a = Reshape(X, s)
      b = Expand(a, s)
      t = Constant<value = int64[2] {3, 2}>()
      Y = Reshape(b, t)
    }""", remove_noops)
    assert result.ops == ["Reshape"]


def test_reshape_with_symbolic_equal_shape(check):
    result = check("""
    g (float[N, 3] X, int64[2] S) => (float[N, 3] Y) {
      a = Reshape(X, S)
      Y = Neg(a)
    }""", remove_noops, run=False)
    assert result.unchanged  # output shape unknown: S could be anything


def test_unsqueeze_then_squeeze_same_axes(check):
    result = check("""
    g (float[2, 3] X) => (float[2, 3] Y) {
      ax = Constant<value = int64[2] {0, -1}>()
      ax2 = Constant<value = int64[2] {3, 0}>()
      u = Unsqueeze(X, ax)
      s = Squeeze(u, ax2)
      Y = Neg(s)
    }""", remove_noops)
    assert result.ops == ["Neg"]


def test_squeeze_then_unsqueeze_same_axes(check):
    result = check("""
    g (float[2, 1, 3] X) => (float[2, 1, 3] Y) {
      ax = Constant<value = int64[1] {1}>()
      s = Squeeze(X, ax)
      u = Unsqueeze(s, ax)
      Y = Neg(u)
    }""", remove_noops)
    assert result.ops == ["Neg"]


def test_unsqueeze_then_squeeze_other_axes_stays(check):
    result = check("""
    g (float[2, 1] X) => (float[1, 2] Y) {
      a0 = Constant<value = int64[1] {0}>()
      a2 = Constant<value = int64[1] {2}>()
      u = Unsqueeze(X, a0)
      Y = Squeeze(u, a2)
    }""", remove_noops)
    assert result.unchanged


@pytest.mark.parametrize("cond,expect", [("bool[1] {1}", "X"), ("bool[1] {0}", "Z")])
def test_where_with_constant_condition(check, cond, expect):
    result = check(f"""
    g (float[2, 3] X, float[2, 3] Z) => (float[2, 3] Y) {{
      c = Constant<value = {cond}>()
      w = Where(c, X, Z)
      Y = Neg(w)
    }}""", remove_noops)
    assert result.ops == ["Neg"]
    assert result.node("Neg").inputs[0].name == expect


def test_where_that_broadcasts_stays(check):
    result = check("""
    g (float[3] X, float[2, 3] Z) => (float[2, 3] Y) {
      c = Constant<value = bool {1}>()
      w = Where(c, X, Z)
      Y = Neg(w)
    }""", remove_noops)
    assert result.unchanged


# A Reshape whose target keeps every dim but one -1 (the first dim: unknown to inference in
# exports whose batch a converter hid).
RESHAPE_TO_ITSELF = """
g (float[N, 2, {last}] x) => (float[M, 2, {last}] z) {{
    t = Constant <value = int64[3] {{{target}}}> ()
    y = Reshape (x, t)
    z = Relu (y)
}}
"""


@pytest.mark.parametrize("target, last, gone", [
    ("-1, 2, 4", "4", True),    # every other dim kept, the -1 fixed by the element count
    ("0, 2, -1", "4", True),    # copies and one -1
    ("-1, 4, 2", "4", False),   # a different layout
    ("-1, 2, 4", "S", False),   # S may be 0 at run time: the -1 would not be determined
])
def test_reshape_to_its_own_shape_with_an_unknown_dim(check, target, last, gone):
    text = RESHAPE_TO_ITSELF.format(target=target, last=last)
    result = check(text, remove_noops, run=last != "S")
    assert ("Reshape" not in result.ops) == gone


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_by_zero_is_removed_in_any_mode(check, mode):
    result = check(f"""
    g (float[b, 4, h] X) => (float[b, 4, h] Y) {{
      pads = Constant <value = int64[6] {{0, 0, 0, 0, 0, 0}}> ()
      p = Pad <mode = "{mode}"> (X, pads)
      Y = Neg(p)
    }}""", remove_noops)
    assert result.ops == ["Neg"]


def test_pad_by_something_stays(check):
    result = check("""
    g (float[b, 4, 5] X) => (float[b, 4, 6] Y) {
      pads = Constant <value = int64[6] {0, 0, 0, 0, 0, 1}> ()
      p = Pad (X, pads)
      Y = Neg(p)
    }""", remove_noops)
    assert result.unchanged
