"""The verifier catches every kind of broken IR (each graph is broken on purpose)."""

from __future__ import annotations

import pytest

from onnxopt.importer import import_model
from onnxopt.ir import Value
from onnxopt.ir.verifier import IRVerificationError, verify_graph

TEXT = """
agraph (float[N] x) => (float[N] y) {
  a = Relu (x)
  b = Neg (a)
  y = Add (a, b)
}
"""


@pytest.fixture
def m(make_model):
    model = import_model(make_model(TEXT))
    verify_graph(model.graph)
    return model


def _node(g, out):
    return next(n for n in g if n.outputs[0].name == out)


def _broken(m, match):
    with pytest.raises(IRVerificationError, match=match):
        verify_graph(m.graph)


def test_missing_use(m):
    a = _node(m.graph, "a").output
    a._uses.pop()
    _broken(m, r"%a: use list lacks \(.*, 0\)")


def test_use_that_does_not_read(m):
    a = _node(m.graph, "a").output
    a._uses.append((_node(m.graph, "b"), 5))
    _broken(m, r"%a: use \(.*, 5\) does not read it")


def test_duplicate_use(m):
    a = _node(m.graph, "a").output
    a._uses.append(a._uses[0])
    _broken(m, "%a: duplicate entries in use list")


def test_input_changed_behind_the_graphs_back(m):
    b = _node(m.graph, "b")
    b._inputs[0] = m.graph.inputs[0]
    _broken(m, r"%x: use list lacks")


def test_use_by_a_removed_node(m):
    b = _node(m.graph, "b")
    y = _node(m.graph, "y")
    m.graph.set_input(y, 1, m.graph.inputs[0])
    m.graph._unlink(b)  # unlinked, but its use of %a is still recorded
    b.graph = None
    _broken(m, "%a: used by removed node")


def test_read_before_defined(m):
    g = m.graph
    g.move_before(_node(g, "a"), _node(g, "b"))
    _broken(m, r": input 0 %a is read before it is defined")


def test_unsafe_remove_leaves_a_dangling_read(m):
    g = m.graph
    g.remove(_node(g, "b"), safe=False)
    _broken(m, r"input 1 %b is read before it is defined")


def test_value_of_another_graph(m, make_model):
    other = import_model(make_model(TEXT)).graph
    m.graph.set_input(_node(m.graph, "b"), 0, other.inputs[0])
    _broken(m, r"%x is read before it is defined \(or is not in this graph\)")


def test_ssa_name_twice(m):
    _node(m.graph, "b").output.name = "a"
    _broken(m, "%a: name defined twice")


def test_wrong_producer(m):
    b = _node(m.graph, "b")
    b.output.index = 1
    _broken(m, "%b: producer/index do not match")


def test_input_with_a_producer(m):
    m.graph.inputs[0].producer = _node(m.graph, "a")
    _broken(m, "%x: graph input or constant has a producer")


def test_node_count(m):
    m.graph._count += 1
    _broken(m, "node count 4 != 3")


def test_undefined_graph_output(m):
    m.graph.set_outputs([Value("ghost", "float32", ("N",))])
    _broken(m, "graph output %ghost is not defined")


@pytest.mark.parametrize("shape, message", [
    ([1, 2], "shape must be a tuple, got list"),
    ((2, -1), "bad dimension -1"),
    ((2, 1.5), "bad dimension 1.5"),
    ((True,), "bad dimension True"),
])
def test_bad_shapes(m, shape, message):
    _node(m.graph, "a").output.shape = shape
    _broken(m, message)


def test_good_shapes(m):
    _node(m.graph, "a").output.shape = ("N", None, 3)
    _node(m.graph, "b").output.shape = None
    verify_graph(m.graph)


def test_subgraph_with_wrong_parent(make_model):
    m = import_model(make_model("""
        agraph (float[N] x, bool c) => (float[N] y) {
          y = If (c) < then_branch = g1 () => (float[N] t) { t = Relu (x) },
                       else_branch = g2 () => (float[N] e) { e = Neg (x) } >
        }"""))
    verify_graph(m.graph)
    sub = m.graph.outputs[0].producer.attr("then_branch")
    sub.parent = None
    with pytest.raises(IRVerificationError, match="subgraph g1 has wrong parent"):
        verify_graph(m.graph)


def test_subgraph_reading_a_later_outer_value(make_model):
    m = import_model(make_model("""
        agraph (float[N] x, bool c) => (float[N] y) {
          y = If (c) < then_branch = g1 () => (float[N] t) { t = Relu (x) },
                       else_branch = g2 () => (float[N] e) { e = Neg (x) } >
          late = Sigmoid (x)
        }"""))
    if_node = m.graph.outputs[0].producer
    late = next(n for n in m.graph if n.op_type == "Sigmoid").output
    inner = next(iter(if_node.attr("then_branch")))
    if_node.attr("then_branch").set_input(inner, 0, late)
    with pytest.raises(IRVerificationError, match="input 0 %late is read before it is defined"):
        verify_graph(m.graph)
