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


def _constant_names(graph) -> dict[str, list[str]]:
    """Each graph's constants, the main graph first, then its subgraphs in order."""
    out = {graph.name: sorted(graph.constants)}
    for sub in graph.all_graphs()[1:]:
        out[sub.name] = sorted(sub.constants)
    return out


def fold_then_share(model):
    """The Constant nodes become constants (fold_constants), then CSE."""
    from onnxopt.normalize.fold_constants import fold_constants

    fold_constants(model)
    return eliminate_common_subexpressions(model)


IF_BRANCHES = """
g (bool c, float[2] x) => (float[2] y) {
  y = If (c) <
    then_branch = then_g () => (float[2] t) {
      k1 = Constant<value = float[2] {2.0, 3.0}>()
      t = Mul (x, k1)
    },
    else_branch = else_g () => (float[2] e) {
      k2 = Constant<value = float[2] {2.0, 3.0}>()
      e = Add (x, k2)
    }
  >
}"""


def test_equal_constants_of_two_branches_become_one_in_the_main_graph(check):
    # Each branch of a merged decoder held its own copy: the file was heavier than its input.
    result = check(IF_BRANCHES, fold_then_share)
    assert result.changes == 1
    names = _constant_names(result.model.graph)
    assert len(names["g"]) == 1 and names["then_g"] == names["else_g"] == []


BRANCH_OUTPUT = """
g (bool c, float[2] x) => (float[2] y) {
  y = If (c) <
    then_branch = then_g () => (float[2] t) {
      t = Constant<value = float[2] {2.0, 3.0}>()
    },
    else_branch = else_g () => (float[2] e) {
      k2 = Constant<value = float[2] {2.0, 3.0}>()
      e = Add (x, k2)
    }
  >
}"""


def test_a_constant_that_is_its_branchs_output_stays_in_the_branch(check):
    # ONNX Runtime refuses a subgraph output that is read from the enclosing scope.
    result = check(BRANCH_OUTPUT, fold_then_share)
    names = _constant_names(result.model.graph)
    assert names["g"] == [] and len(names["else_g"]) == 1
