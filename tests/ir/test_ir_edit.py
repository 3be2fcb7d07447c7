"""The editing helpers every stage shares: the dead-node remover and the walk over every graph."""

from __future__ import annotations

from onnxopt.importer import import_model
from onnxopt.ir.edit import remove_if_dead
from onnxopt.ir.verifier import verify_graph

DEAD_CHAIN = """
agraph (float[N] x) => (float[N] out) {
  a = Relu (x)
  b = Neg (a)
  c = Abs (b)
  out = Sigmoid (x)
}
"""

NESTED = """
agraph (float[N] x, bool c) => (float[N] y) {
  y = If (c) <
      then_branch = g1 () => (float[N] t) {
          t = If (c) <
              then_branch = g3 () => (float[N] u) { u = Relu (x) },
              else_branch = g4 () => (float[N] v) { v = Neg (x) }
          >
      },
      else_branch = g2 () => (float[N] e) { e = Abs (x) }
  >
}
"""


def _nodes(graph) -> dict:
    return {n.outputs[0].name: n for n in graph}


def test_a_chain_given_readers_first_goes_at_once(make_model):
    graph = import_model(make_model(DEAD_CHAIN)).graph
    n = _nodes(graph)
    assert remove_if_dead(graph, n["c"], n["b"], n["a"]) == 3
    assert list(_nodes(graph)) == ["out"]
    verify_graph(graph)


def test_a_node_still_read_when_its_turn_comes_stays(make_model):
    graph = import_model(make_model(DEAD_CHAIN)).graph
    n = _nodes(graph)
    assert remove_if_dead(graph, n["a"], n["b"], n["c"]) == 1  # a and b were read at their turn
    assert list(_nodes(graph)) == ["a", "b", "out"]
    verify_graph(graph)


def test_graph_outputs_removed_nodes_and_none_are_left_alone(make_model):
    graph = import_model(make_model(DEAD_CHAIN)).graph
    n = _nodes(graph)
    assert remove_if_dead(graph, n["out"]) == 0
    assert remove_if_dead(graph, n["c"], None, n["c"]) == 1
    verify_graph(graph)


def test_all_graphs_lists_every_body_outer_first(make_model):
    graph = import_model(make_model(NESTED)).graph
    graphs = graph.all_graphs()
    assert graphs[0] is graph and len(graphs) == 5
    for g in graphs[1:]:  # each body comes after the graph that holds it
        assert graphs.index(g.parent.graph) < graphs.index(g)
    assert {id(g) for g in graphs} == {id(graph)} | {
        id(sub) for node in graph.all_nodes() for sub in node.subgraphs()}
