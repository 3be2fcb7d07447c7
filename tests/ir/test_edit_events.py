"""Edit events: every edit a graph makes is heard by its listeners, in the order made."""

from __future__ import annotations

import numpy as np

from onnxopt.importer import import_model
from onnxopt.ir import LazyTensor
from onnxopt.ir.edit import replace_value
from onnxopt.ir.graph import EditListener

CHAIN = """
agraph (float[N] x, float[N] y) => (float[N] out) {
  a = Add (x, y)
  b = Relu (a)
  c = Neg (b)
  out = Add (c, a)
}
"""


class Recorder(EditListener):
    def __init__(self) -> None:
        self.heard: list[tuple] = []

    def node_inserted(self, node):
        self.heard.append(("inserted", node.op_type))

    def node_removed(self, node, inputs):
        self.heard.append(("removed", node.op_type))

    def input_changed(self, node, old, new):
        self.heard.append(("input", node.op_type, old and old.name, new and new.name))

    def uses_replaced(self, old, new, readers):
        self.heard.append(("uses", old.name, new.name, [n.op_type for n in readers]))

    def constant_removed(self, value):
        self.heard.append(("constant", value.name))

    def node_changed(self, node):
        self.heard.append(("changed", node.op_type))


def _graph(make_model):
    g = import_model(make_model(CHAIN)).graph
    rec = Recorder()
    g.names.listeners = (rec,)
    return g, rec, {n.outputs[0].name: n for n in g}


def test_each_edit_is_heard(make_model):
    g, rec, nodes = _graph(make_model)
    x = g.inputs[0]
    sig = g.make_node("Sigmoid", [x], before=nodes["b"])
    g.set_input(nodes["b"], 0, sig.output)
    replace_value(g, nodes["a"].output, sig.output)
    g.remove(nodes["a"])
    g.changed(nodes["c"])
    assert rec.heard == [("inserted", "Sigmoid"), ("input", "Relu", "a", sig.output.name),
                         ("uses", "a", sig.output.name, ["Add"]), ("removed", "Add"),
                         ("changed", "Neg")]


def test_a_move_is_heard_as_an_insertion_and_a_constant_removed_too(make_model):
    g, rec, nodes = _graph(make_model)
    g.move_before(nodes["a"], nodes["c"])  # not in order any more; the event is what counts
    k = g.add_constant(LazyTensor.from_array(np.ones(1, np.float32)))
    g.remove_constant(k)
    assert rec.heard == [("inserted", "Neg"), ("constant", k.name)]


def test_an_input_set_to_what_it_was_is_no_edit(make_model):
    g, rec, nodes = _graph(make_model)
    g.set_input(nodes["b"], 0, nodes["a"].output)
    assert rec.heard == []

