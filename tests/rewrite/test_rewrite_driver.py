"""The rewrite driver: rewrites run again only after edits, settle without a round cap, and
a pair that undoes each other is stopped with their names; the node worklist hears edits."""

from __future__ import annotations

import pytest

from onnxopt.importer import import_model
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.rewrite.driver import (
    SWEEP_LIMIT,
    NodeWorklist,
    PassResult,
    RewriteLoop,
    listening,
    run_to_fixed_point,
)

CHAIN = """
agraph (float[N] x) => (float[N] out) {
  a = Neg (x)
  b = Neg (a)
  c = Neg (b)
  d = Neg (c)
  e = Neg (d)
  out = Relu (e)
}
"""


def _model(make_model):
    return import_model(make_model(CHAIN))


def drop_one_double_negation(model):
    """One Neg(Neg(v)) -> v per call: the driver must call it until none is left."""
    g = model.graph
    for node in g:
        inner = node.inputs[0].producer if node.inputs[0] is not None else None
        if node.op_type == "Neg" and inner is not None and inner.op_type == "Neg":
            replace_value(g, node.output, inner.inputs[0])
            remove_if_dead(g, node, inner)
            return PassResult(1)
    return PassResult(0)


def test_a_rewrite_runs_until_the_graph_settles_with_no_round_cap(make_model):
    model = _model(make_model)
    calls = []

    def counted(m):
        calls.append(1)
        return drop_one_double_negation(m)

    results = run_to_fixed_point(model, [("neg", counted)])
    assert results == {"neg": PassResult(2)}
    assert [n.op_type for n in model.graph] == ["Neg", "Relu"]
    assert len(calls) == 3  # twice with an edit, once to find nothing: no extra sweep


def test_a_rewrite_that_found_nothing_is_not_run_again_until_an_edit(make_model):
    model = _model(make_model)
    seen = []

    def idle(m):
        seen.append("idle")
        return PassResult(0)

    def neg(m):
        seen.append("neg")
        return drop_one_double_negation(m)

    run_to_fixed_point(model, [("idle", idle), ("neg", neg)])
    # idle runs first, and again after each sweep in which neg edited; not after the last.
    assert seen == ["idle", "neg", "idle", "neg", "idle", "neg"]


def test_a_pair_that_undoes_each_other_is_named(make_model):
    model = _model(make_model)
    g = model.graph

    def flip(m):
        node = next(iter(g))
        node.op_type = "Abs" if node.op_type == "Neg" else "Neg"
        g.changed(node)
        return PassResult(1)

    with pytest.raises(RewriteLoop, match=rf"after {SWEEP_LIMIT} sweeps; still editing: flip"):
        run_to_fixed_point(model, [("flip", flip)])


def test_a_count_the_graph_did_not_hear_of_is_a_bug(make_model):
    model = _model(make_model)
    with pytest.raises(AssertionError, match="silent counted 1 change"):
        run_to_fixed_point(model, [("silent", lambda m: PassResult(1))])


def test_the_worklist_queues_readers_of_a_replaced_value_then_nodes_made(make_model):
    model = _model(make_model)
    g = model.graph
    nodes = {n.outputs[0].name: n for n in g}
    work = NodeWorklist(g, [], lambda n: True)
    with listening(g.names, work), work.rewriting():
        made = g.make_node("Abs", [nodes["d"].output], before=nodes["out"])
        replace_value(g, nodes["e"].output, made.output)
    assert [n.op_type for n in work] == ["Relu", "Abs"]
    assert g.names.listeners == ()


def test_once_settled_runs_only_where_the_rewrites_settled_and_its_edits_restart_them(
        make_model):
    """A ``once_settled`` rewrite (the pipeline's fusion again) runs after the others made no
    edit in a sweep; what it edits sets them going again, heard by the same log."""
    model = _model(make_model)
    order, done = [], []

    def negs(m):
        result = drop_one_double_negation(m)
        order.append(("neg", result.changed))
        return result

    def relu_to_neg_pair(m):
        """Once: Relu(v) -> Relu(Neg(Neg(v))), work for ``negs`` again."""
        order.append(("late", len(order)))
        g = m.graph
        relu = next(n for n in g if n.op_type == "Relu")
        if done:
            return PassResult(0)
        done.append(1)
        a = g.make_node("Neg", [relu.inputs[0]], before=relu)
        b = g.make_node("Neg", [a.output], before=relu)
        g.set_input(relu, 0, b.output)
        return PassResult(1)

    results = run_to_fixed_point(model, [("neg", negs)], once_settled=[("late", relu_to_neg_pair)])
    assert results == {"neg": PassResult(3), "late": PassResult(1)}
    assert order == [("neg", 1), ("neg", 1), ("neg", 0), ("late", 3), ("neg", 1), ("neg", 0),
                     ("late", 6)]
    assert [n.op_type for n in model.graph] == ["Neg", "Relu"]
