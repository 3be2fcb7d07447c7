"""Random edits through the Graph API never break the IR's invariants.

Each example imports a small graph, applies a random sequence of edits
(insert a node, rewire an input, replace all uses, remove dead nodes, try to
remove a live one), and after every edit runs the verifier and recomputes the
use lists from scratch. At the end the graph must still export to a model that
``onnx.checker`` accepts.
"""

from __future__ import annotations

from collections import Counter

import onnx
import onnx.parser
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxopt.exporter import export_model
from onnxopt.importer import import_model
from onnxopt.ir import Graph, Node, Value
from onnxopt.ir.verifier import verify_graph

TEXT = """<ir_version: 10, opset_import: ["": 18]>
agraph (float[N] x, float[N] y) => (float[N] out, float[N] aux) <float[1] k = {2.0}> {
  a = Add (x, y)
  b = Relu (a)
  c = Mul (b, k)
  out = Add (c, a)
  aux = Neg (b)
}
"""
UNARY = ("Relu", "Neg", "Sigmoid", "Abs")
BINARY = ("Add", "Mul", "Sub", "Max")


def _fresh_graph() -> Graph:
    proto = onnx.parser.parse_model(TEXT)
    proto.ir_version = 10
    return import_model(proto).graph


def _visible_before(g: Graph, node: Node | None) -> list[Value]:
    """Values a node at this position may read (``None``: the end of the graph)."""
    values = list(g.inputs) + list(g.constants.values())
    for n in g:
        if n is node:
            break
        values.extend(n.outputs)
    return values


def _check_use_lists(g: Graph) -> None:
    """Recompute every use list from the nodes' inputs and compare."""
    expected: Counter = Counter()
    values = list(g.inputs) + list(g.constants.values())
    for n in g:
        values.extend(n.outputs)
        for i, v in enumerate(n.inputs):
            if v is not None:
                expected[(id(v), id(n), i)] += 1
    actual = Counter((id(v), id(n), i) for v in values for n, i in v.uses())
    assert actual == expected
    assert len(list(g)) == len(g)
    assert list(g.reversed()) == list(g)[::-1]


def _insert(g: Graph, data) -> None:
    nodes = list(g)
    at = data.draw(st.sampled_from(nodes + [None]), label="insert before")
    visible = _visible_before(g, at)
    op = data.draw(st.sampled_from(UNARY + BINARY), label="op")
    arity = 1 if op in UNARY else 2
    ins = [data.draw(st.sampled_from(visible), label="input") for _ in range(arity)]
    new = g.make_node(op, ins, before=at, created_by="hypothesis")
    new.output.dtype, new.output.shape = "float32", ("N",)
    if at is not None and data.draw(st.booleans(), label="rewire a reader"):
        index = data.draw(st.integers(0, len(at.inputs) - 1), label="index")
        g.set_input(at, index, new.output)


def _set_input(g: Graph, data) -> None:
    node = data.draw(st.sampled_from(list(g)), label="node")
    index = data.draw(st.integers(0, len(node.inputs) - 1), label="index")
    g.set_input(node, index, data.draw(st.sampled_from(_visible_before(g, node)), label="value"))


def _replace(g: Graph, data) -> None:
    node = data.draw(st.sampled_from(list(g)), label="node")
    old = node.output
    candidates = [v for v in _visible_before(g, node) if v.producer is not None]
    if not candidates:
        return
    new = data.draw(st.sampled_from(candidates), label="new")
    if old.is_graph_output and new.is_graph_output:
        return  # would list one value as two outputs
    outputs = data.draw(st.booleans(), label="outputs")
    if old.is_graph_output and not outputs:
        readers = old.uses()
        with pytest.raises(ValueError, match="is a graph output"):
            g.replace_all_uses(old, new)
        assert old.uses() == readers  # a refusal changes nothing
        return
    g.replace_all_uses(old, new, outputs=outputs)
    assert old.uses() == []


def _remove_dead(g: Graph, data) -> None:
    dead = [n for n in g if not any(o.uses() or o.is_graph_output for o in n.outputs)]
    if dead:
        g.remove(data.draw(st.sampled_from(dead), label="dead node"))


def _remove_live(g: Graph, data) -> None:
    live = [n for n in g if any(o.uses() or o.is_graph_output for o in n.outputs)]
    node = data.draw(st.sampled_from(live), label="live node")
    before = repr(g)
    with pytest.raises(ValueError, match="cannot remove"):
        g.remove(node)
    assert repr(g) == before


EDITS = {"insert": _insert, "set_input": _set_input, "replace": _replace,
         "remove_dead": _remove_dead, "remove_live": _remove_live}


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_random_edits_keep_the_invariants(data):
    g = _fresh_graph()
    for _ in range(data.draw(st.integers(1, 15), label="edits")):
        edit = data.draw(st.sampled_from(sorted(EDITS)), label="edit")
        EDITS[edit](g, data)
        verify_graph(g)
        _check_use_lists(g)
    # Whatever the edits, the graph is still a valid ONNX model.
    model = import_model(onnx.parser.parse_model(TEXT))
    model.graph = g
    proto = export_model(model)
    proto.ir_version = 10
    onnx.checker.check_model(proto, full_check=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=12))
def test_walk_while_removing_visits_each_survivor_once(picks):
    """Remove arbitrary nodes (unsafely) during a walk: the walk never repeats or loses a node."""
    g = _fresh_graph()
    for k in range(20):
        g.make_node("Relu", [g.inputs[0]], output_names=[f"r{k}"])
    order = [n.outputs[0].name for n in g]
    doomed = {order[p % len(order)] for p in picks}
    seen = []
    for node in g:
        seen.append(node.outputs[0].name)
        for other in list(g):
            name = other.outputs[0].name
            if name in doomed and name not in seen and len(doomed) % 2:
                g.remove(other, safe=False)  # a node ahead of the walk
        if seen[-1] in doomed:
            g.remove(node, safe=False)
    assert len(seen) == len(set(seen))
    assert set(order) - doomed <= set(seen)
    assert [n.outputs[0].name for n in g] == [n for n in order if n not in doomed]
