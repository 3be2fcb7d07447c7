"""eliminate_common_subexpressions: equal nodes and equal small constants are computed once."""

from __future__ import annotations

from onnxopt.normalize.eliminate_common_subexpressions import eliminate_common_subexpressions

CSE = eliminate_common_subexpressions


def test_repeated_shape_chains_merge(check):
    result = check("""
    g (float[N, 4] X) => (float[N, 4] Y) {
      s1 = Shape(X)
      s2 = Shape(X)
      i1 = Constant<value = int64 {0}>()
      i2 = Constant<value = int64 {0}>()
      g1 = Gather(s1, i1)
      g2 = Gather(s2, i2)
      ax = Constant<value = int64[1] {0}>()
      u1 = Unsqueeze(g1, ax)
      u2 = Unsqueeze(g2, ax)
      four = Constant<value = int64[1] {4}>()
      c = Concat<axis = 0>(u1, four)
      d = Concat<axis = 0>(u2, four)
      a = Reshape(X, c)
      b = Reshape(X, d)
      Y = Add(a, b)
    }""", CSE)
    assert result.ops == ["Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Add"]
    assert len(result.model.graph.constants) == 3  # i1/i2 merged; ax and four differ in shape/value


def test_commutative_operands_in_either_order_merge(check):
    result = check("""
    g (float[2] X, float[2] Z) => (float[2] Y) {
      a = Add(X, Z)
      b = Add(Z, X)
      c = Sub(X, Z)
      d = Sub(Z, X)
      e = Mul(a, b)
      f = Mul(c, d)
      Y = Add(e, f)
    }""", CSE)
    assert result.ops == ["Add", "Sub", "Sub", "Mul", "Mul", "Add"]


def test_different_attributes_do_not_merge(check):
    result = check("""
    g (float[2, 3, 4] X) => (float[2, 3, 3] Y, float[4, 3, 2] Z) {
      a = Transpose<perm = [0, 2, 1]>(X)
      c = Transpose<perm = [0, 2, 1]>(X)
      Z = Transpose<perm = [2, 1, 0]>(X)
      d = MatMul(X, a)
      e = MatMul(X, c)
      Y = Add(d, e)
    }""", CSE)
    assert result.ops == ["Transpose", "Transpose", "MatMul", "Add"]


def test_matmul_transpose_flag_is_part_of_the_key(onnx_text):
    from onnxopt.importer import import_model

    model = import_model(onnx_text("""
    g (float[3, 3] X) => (float[3, 3] Y) {
      a = MatMul(X, X)
      b = MatMul(X, X)
      Y = Add(a, b)
    }"""))
    next(iter(model.graph)).sem["transpose_b"] = True
    assert CSE(model).changed == 0


def test_duplicate_that_is_a_graph_output_takes_its_name(check):
    result = check("""
    g (float[2] X) => (float[2] Y, float[2] Z) {
      a = Neg(X)
      b = Exp(a)
      Y = Abs(b)
      Z = Exp(a)
    }""", CSE)
    assert result.ops == ["Neg", "Exp", "Abs"]
    assert [v.name for v in result.model.graph.outputs] == ["Y", "Z"]
    assert result.model.graph.outputs[1].producer.op_type == "Exp"


def test_two_graph_outputs_computing_the_same_are_kept(check):
    result = check("""
    g (float[2] X) => (float[2] Y, float[2] Z) {
      Y = Neg(X)
      Z = Neg(X)
    }""", CSE)
    assert result.unchanged


def test_random_ops_are_not_merged(check):
    result = check("""
    g (float[2] X) => (float[2] Y) {
      a = RandomUniformLike(X)
      b = RandomUniformLike(X)
      Y = Sub(a, b)
    }""", CSE, run=False)
    assert result.unchanged


def test_equal_small_constants_merge_but_not_minus_zero(check):
    result = check("""
    g (float[2] X) => (float[2] Y) {
      a = Constant<value = float[2] {1, 2}>()
      b = Constant<value = float[2] {1, 2}>()
      z = Constant<value = float {0.0}>()
      m = Constant<value = float {-0.0}>()
      c = Add(X, a)
      d = Add(c, b)
      e = Add(d, z)
      Y = Add(e, m)
    }""", CSE)
    assert result.changes == 1
    assert len(result.model.graph.constants) == 3
