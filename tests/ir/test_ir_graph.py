"""Graph editing: removal safety, use rewiring, walking while editing, fresh names."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.importer import import_model
from onnxopt.ir import Graph, LazyTensor, NameScope
from onnxopt.ir.verifier import verify_graph

CHAIN = """
agraph (float[N] x, float[N] y) => (float[N] out) {
  a = Add (x, y)
  b = Relu (a)
  c = Neg (b)
  out = Add (c, a)
}
"""


@pytest.fixture
def g(make_model) -> Graph:
    return import_model(make_model(CHAIN)).graph


def _by_output(g: Graph, name: str):
    return next(n for n in g if n.outputs[0].name == name)


def _ops(g: Graph) -> list[str]:
    return [n.outputs[0].name for n in g]


def test_remove_refuses_a_node_still_read(g):
    before = repr(g)
    with pytest.raises(ValueError, match=r"cannot remove .*: b is still read by "):
        g.remove(_by_output(g, "b"))
    assert repr(g) == before
    verify_graph(g)


def test_remove_refuses_a_graph_output(g):
    with pytest.raises(ValueError, match=r"cannot remove .*: out is a graph output"):
        g.remove(_by_output(g, "out"))
    verify_graph(g)


def test_remove_a_batch_that_reads_itself(g):
    b, c, out = _by_output(g, "b"), _by_output(g, "c"), _by_output(g, "out")
    a = _by_output(g, "a")
    g.replace_all_uses(out.output, a.output, outputs=True)
    g.remove([b, c, out])  # c reads b and out reads c: fine when they all go together
    assert _ops(g) == ["a"]
    assert len(g) == 1
    assert a.output.uses() == []
    assert g.outputs == [a.output]
    verify_graph(g)


def test_removed_node_drops_its_uses(g):
    c = _by_output(g, "c")
    b = _by_output(g, "b")
    g.set_input(_by_output(g, "out"), 0, b.output)
    g.remove(c)
    assert [n.outputs[0].name for n, _ in b.output.uses()] == ["out"]
    assert c.graph is None and c.inputs == (None,)
    verify_graph(g)


def test_replace_all_uses_refuses_a_graph_output_unless_asked(g):
    out, c = _by_output(g, "out").output, _by_output(g, "c").output
    with pytest.raises(ValueError, match="out is a graph output; pass outputs=True to rewire it"):
        g.replace_all_uses(out, c)
    assert g.outputs == [out]
    verify_graph(g)
    g.replace_all_uses(out, c, outputs=True)
    assert g.outputs == [c]
    assert out.is_graph_output is False and c.is_graph_output is True
    verify_graph(g)


def test_refused_replace_changes_nothing(g, make_model):
    """A refusal must come before any edit: the output's readers keep reading it."""
    m = import_model(make_model("""
        agraph (float[N] x) => (float[N] a, float[N] b) { a = Relu (x) \n b = Neg (a) }"""))
    a = m.graph.outputs[0]
    with pytest.raises(ValueError):
        m.graph.replace_all_uses(a, m.graph.inputs[0])
    assert [n.op_type for n, _ in a.uses()] == ["Neg"]
    verify_graph(m.graph)


def test_replace_all_uses_moves_every_reader(g):
    a, b = _by_output(g, "a").output, _by_output(g, "b").output
    assert sorted(i for _, i in a.uses()) == [0, 1]
    g.replace_all_uses(a, g.inputs[0])
    assert a.uses() == []
    assert {(n.outputs[0].name, i) for n, i in g.inputs[0].uses()} == {("a", 0), ("b", 0),
                                                                        ("out", 1)}
    assert b.num_uses == 1
    verify_graph(g)


def test_uses_is_a_snapshot(g):
    a = _by_output(g, "a").output
    uses = a.uses()
    for node, index in uses:
        g.set_input(node, index, g.inputs[1])
    assert len(uses) == 2 and a.uses() == []
    verify_graph(g)


def test_walk_survives_removing_the_current_node(g):
    out = _by_output(g, "out")
    g.set_input(out, 0, _by_output(g, "a").output)  # c and b now unread
    seen = []
    for node in g:
        seen.append(node.outputs[0].name)
        if node.outputs[0].name == "b":
            g.set_input(_by_output(g, "c"), 0, g.inputs[0])
            g.remove(node)
        elif node.outputs[0].name == "c":
            g.remove(node)
    assert seen == ["a", "b", "c", "out"]
    assert _ops(g) == ["a", "out"]
    verify_graph(g)


def test_walk_skips_nodes_removed_ahead_and_sees_nodes_inserted_ahead(g):
    seen = []
    for node in g:
        seen.append(node.outputs[0].name)
        if node.outputs[0].name == "a":
            c = _by_output(g, "c")
            g.set_input(_by_output(g, "out"), 0, node.output)
            g.remove(c)  # removed before the walk reaches it
            g.make_node("Sigmoid", [node.output], output_names=["s"], before=_by_output(g, "b"))
    assert seen == ["a", "s", "b", "out"]
    verify_graph(g)


def test_reverse_walk_survives_removing_the_current_node(g):
    out = _by_output(g, "out")
    g.replace_all_uses(out.output, _by_output(g, "a").output, outputs=True)
    seen = []
    for node in g.reversed():
        seen.append(node.outputs[0].name)
        if not node.output.uses() and not node.output.is_graph_output:
            g.remove(node)
    assert seen == ["out", "c", "b", "a"]
    assert _ops(g) == ["a"]
    verify_graph(g)


def test_make_node_places_and_names(g):
    b = _by_output(g, "b")
    n = g.make_node("Sigmoid", [b.output], before=_by_output(g, "c"), created_by="test")
    assert _ops(g) == ["a", "b", n.output.name, "c", "out"]
    assert n.name == "Sigmoid" and n.output.name == "Sigmoid_out0"
    assert n.created_by == "test"
    m = g.make_node("Sigmoid", [b.output])
    assert m.name == "Sigmoid_1" and _ops(g)[-1] == m.output.name
    g.move_before(_by_output(g, "c"), m)
    assert _ops(g)[3] == m.output.name
    verify_graph(g)


def test_set_input_pads_optional_inputs(g):
    c = _by_output(g, "c")
    g.set_input(c, 2, g.inputs[0])
    assert c.inputs[1] is None and c.inputs[2] is g.inputs[0]
    g.set_input(c, 2, None)
    assert all(node is not c for node, _ in g.inputs[0].uses())
    verify_graph(g)


def test_insert_refuses_a_node_of_another_graph(g):
    node = _by_output(g, "b")
    with pytest.raises(ValueError, match="already belongs to a graph"):
        g.append(node)
    other = Graph("other")
    with pytest.raises(ValueError, match="is not in graph other"):
        other.remove(node, safe=False)


def test_constants(g):
    w = g.add_constant(LazyTensor.from_array(np.ones(3, np.float32)), "w")
    assert w.name == "w" and w.is_constant and w.shape == (3,) and w.dtype == "float32"
    w2 = g.add_constant(LazyTensor.from_array(np.zeros(3, np.float32)), "w")
    assert w2.name == "w_1"
    n = g.make_node("Relu", [w])
    with pytest.raises(ValueError, match="constant w is still read"):
        g.remove_constant(w)
    g.remove(n)
    g.remove_constant(w)
    assert "w" not in g.constants
    verify_graph(g)


def test_name_scope_fresh():
    names = NameScope()
    assert names.fresh("t") == "t"
    assert names.fresh("t") == "t_1"
    names.claim("t_2")
    assert names.fresh("t") == "t_3"
    assert names.fresh("t_1") == "t_1_1"
    assert names.fresh("u") == "u"
    assert {"t", "t_1", "t_2", "t_3", "t_1_1", "u"} == names.taken


def test_name_scope_is_shared_with_subgraphs(make_model):
    m = import_model(make_model("""
        agraph (float[N] x, bool c) => (float[N] y) {
          y = If (c) < then_branch = g1 () => (float[N] inner) { inner = Relu (x) },
                       else_branch = g2 () => (float[N] z) { z = Neg (x) } >
        }"""))
    assert m.graph.names.fresh("inner") == "inner_1"
    assert m.graph.names.fresh("x") == "x_1"


def test_consumers_are_distinct(g):
    a = _by_output(g, "a").output
    out = _by_output(g, "out")
    g.set_input(out, 0, a)  # out reads a twice now
    assert [n.outputs[0].name for n in a.consumers()] == ["b", "out"]
    assert a.num_uses == 3
