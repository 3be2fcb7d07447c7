"""PatternRewrite: a normal form said as a pattern, every case tried at each node in one walk."""

from __future__ import annotations

from onnxopt.importer import import_model
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.rewrite.driver import PassResult, run_to_fixed_point
from onnxopt.rewrite.pattern import PatternRewrite, case

NEGS = """
agraph (float[N] x, float[N] y) => (float[N] out) {
  a = Neg (x)
  b = Neg (a)
  c = Abs (y)
  d = Abs (c)
  out = Add (b, d)
}
"""


def _double(op):
    return lambda p: getattr(p, op)(getattr(p, op)(p.var("x"), name="inner"), name="outer")


def _drop_neg(graph, m):
    replace_value(graph, m.outer.output, m.x)
    remove_if_dead(graph, m.outer, m.inner)
    return True


def _drop_abs(graph, m):
    graph.set_input(m.outer, 0, m.x)  # |(|x|)| is |x|
    remove_if_dead(graph, m.inner)
    return True


def test_each_case_at_its_roots_in_one_walk(make_model):
    model = import_model(make_model(NEGS))
    rewrite = PatternRewrite.of(case(_double("Neg"), ("Neg",), _drop_neg),
                                case(_double("Abs"), ("Abs",), _drop_abs))
    assert rewrite(model) == PassResult(2)
    assert [n.op_type for n in model.graph] == ["Abs", "Add"]
    assert rewrite(model) == PassResult(0)


def test_a_rewrite_not_permitted_is_not_tried(make_model):
    model = import_model(make_model(NEGS))
    model.exactness = model.exactness.refusing(
        {f"drop@{n.name}" for n in model.graph if n.op_type == "Neg"})
    rewrite = PatternRewrite.of(case(_double("Neg"), ("Neg",), _drop_neg, permits="drop"))
    assert run_to_fixed_point(model, [("drop", rewrite)]) == {}


def test_a_permitted_rewrite_is_made(make_model):
    model = import_model(make_model(NEGS))
    rewrite = PatternRewrite.of(case(_double("Neg"), ("Neg",), _drop_neg, permits="drop"))
    assert run_to_fixed_point(model, [("drop", rewrite)]) == {"drop": PassResult(1)}


def test_with_nothing_touched_nothing_is_tried_and_an_edit_leads_back(make_model):
    model = import_model(make_model(NEGS))
    tried = []

    def counting(graph, m):
        tried.append(m.outer.name)
        return False

    rewrite = PatternRewrite.of(case(_double("Neg"), ("Neg",), counting))
    rewrite(model, around=[])
    assert tried == []
    neg = next(n for n in model.graph if n.op_type == "Neg")  # the inner one: a step above
    rewrite(model, around=[neg])
    assert len(tried) == 1


# NEGS, with a long chain beside it: what an edit touches is a small part of the graph (where
# it is not, the rewrite walks everything, which costs less than marking).
WIDE = NEGS.replace("  out = Add (b, d)", "".join(
    f"  r{i} = Relu ({'y' if i == 0 else f'r{i - 1}'})\n" for i in range(40))
    + "  s = Add (b, d)\n  out = Add (s, r39)")


def test_the_driver_runs_a_pattern_rewrite_only_around_edits(make_model):
    model = import_model(make_model(WIDE))
    tried = []

    def drop(graph, m):
        tried.append(m.outer.op_type)
        return _drop_neg(graph, m) if m.outer.op_type == "Neg" else False

    rewrite = PatternRewrite.of(case(_double("Neg"), ("Neg",), drop),
                                case(_double("Abs"), ("Abs",), drop))
    results = run_to_fixed_point(model, [("drop", rewrite)])
    assert results == {"drop": PassResult(1)}
    # The first walk tries both; after the Neg pair went, the Abs pair (not reached by that
    # edit: it reads y, not x) is not tried again.
    assert tried == ["Neg", "Abs"]
