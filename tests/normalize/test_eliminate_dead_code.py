"""eliminate_dead_code: unread nodes and constants go; inputs, outputs and subgraph reads stay."""

from __future__ import annotations

from onnxopt.normalize.eliminate_dead_code import eliminate_dead_code


def test_dead_chain_goes_in_one_walk(check):
    result = check("""
    g (float[2] X) => (float[2] Y) {
      a = Neg(X)
      b = Exp(a)
      c = Add(b, a)
      Y = Abs(X)
    }""", eliminate_dead_code)
    assert result.ops == ["Abs"]
    assert result.changes == 3
    assert eliminate_dead_code(result.model).changed == 0


def test_unused_constants_go_and_graph_inputs_stay(check):
    result = check("""
    g (float[2] X, float[2] unused) => (float[2] Y) {
      c = Constant<value = float[2] {1, 2}>()
      d = Constant<value = float[2] {3, 4}>()
      Y = Add(X, c)
    }""", eliminate_dead_code)
    assert result.changes == 1
    assert list(result.model.graph.constants) == ["c"]
    assert [v.name for v in result.model.graph.inputs] == ["X", "unused"]


def test_node_with_an_unused_second_output_stays(check):
    result = check("""
    g (float[4] X) => (float[2] Y) {
      a, b = Split<num_outputs = 2>(X)
      Y = Neg(a)
    }""", eliminate_dead_code)
    assert result.unchanged


def test_reads_from_inside_a_subgraph_count_as_uses(check):
    result = check("""
    g (bool C, float[2] X) => (float[2] Y) {
      T = Neg(X)
      U = Exp(X)
      Y = If(C) <then_branch = g1 () => (float[2] a) { a = Add(T, T) },
                 else_branch = g2 () => (float[2] b) { dead = Abs(U)
                                                      b = Identity(X) }>
    }""", eliminate_dead_code)
    assert result.ops == ["Neg", "If"]  # U only fed a dead node inside the else branch
    assert result.changes == 2


def test_dead_node_with_subgraph_releases_its_outer_reads(check):
    result = check("""
    g (bool C, float[2] X) => (float[2] Y) {
      T = Neg(X)
      Z = If(C) <then_branch = g1 () => (float[2] a) { a = Add(T, T) },
                 else_branch = g2 () => (float[2] b) { b = Identity(T) }>
      Y = Abs(X)
    }""", eliminate_dead_code)
    assert result.ops == ["Abs"]


def test_removing_a_node_releases_its_subgraph_reads(onnx_text):
    """Graph.remove on an If: the outer value its branch read is no longer used by it."""
    from onnxopt.importer import import_model

    model = import_model(onnx_text("""
    g (bool C, float[2] X) => (float[2] Y) {
      T = Neg(X)
      Z = If(C) <then_branch = g1 () => (float[2] a) { a = Add(T, T) },
                 else_branch = g2 () => (float[2] b) { b = Identity(T) }>
      Y = Abs(X)
    }"""))
    neg, if_node, _ = model.graph
    assert neg.output.num_uses == 3
    model.graph.remove(if_node)
    assert neg.output.num_uses == 0
