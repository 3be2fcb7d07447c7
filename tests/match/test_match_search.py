"""The pattern language's search (``exhaustive``, ``accept``) and ``private``: a later part
that fails makes an earlier part try its next operand order; the greedy match does not."""

from __future__ import annotations

from onnxopt.importer import import_model
from onnxopt.match.pattern import Builder, Trace, match_pattern
from onnxopt.normalize.shapes import infer_shapes

p = Builder()

# x·s + m·s with the first product written s·x: the greedy match binds x to s and fails.
SHARED_FACTOR = """
g (float[4] a, float[4] b) => (float[4] y) {
  m = Neg (a)
  first = Mul (b, a)
  second = Mul (m, b)
  y = Add (first, second)
}
"""


def _model(make_model, text):
    model = import_model(make_model(text))
    infer_shapes(model)
    return model


def _root(model, name="y"):
    return next(n for n in model.graph if n.outputs[0].name == name)


def _shared_factor(p):
    x, s = p.var("x"), p.var("s")
    return p.Add(p.Mul(x, s, name="first"), p.Mul(p.Neg(x, name="neg"), s, name="second"))


def test_greedy_match_does_not_retry_an_earlier_sibling(make_model):
    model = _model(make_model, SHARED_FACTOR)
    assert match_pattern(_shared_factor(p), _root(model), Trace()) is None


def test_the_search_retries_an_earlier_siblings_operand_order(make_model):
    model = _model(make_model, SHARED_FACTOR)
    m = match_pattern(_shared_factor(p), _root(model), Trace(), exhaustive=True)
    assert m is not None and m.x.name == "a" and m.s.name == "b"
    assert {n.op_type for n in m.nodes} == {"Add", "Mul", "Neg"}


def test_the_search_finds_the_greedy_match_first(make_model):
    model = _model(make_model, "g (float[4] a) => (float[4] y) {\n n = Neg (a)\n y = Mul (a, n)\n}")
    pat = p.Mul(p.var("u"), p.var("v"))
    greedy = match_pattern(pat, _root(model), Trace())
    searched = match_pattern(pat, _root(model), Trace(), exhaustive=True)
    assert (greedy.u, greedy.v) == (searched.u, searched.v)
    assert greedy.u.name == "a"


def test_accept_takes_the_first_match_it_approves_in_order(make_model):
    model = _model(make_model, "g (float[4] a) => (float[4] y) {\n n = Neg (a)\n y = Mul (a, n)\n}")
    pat = p.Mul(p.var("u"), p.var("v"))
    seen = []

    def second(m):
        seen.append(m.u.name)
        return m.u.name == "n"

    m = match_pattern(pat, _root(model), Trace(), accept=second)
    assert m is not None and m.u.name == "n" and m.v.name == "a"
    assert seen == ["a", "n"]  # the node's own order first, then the reverse
    assert match_pattern(pat, _root(model), Trace(), accept=lambda m: False) is None


def test_alternatives_are_searched_in_order(make_model):
    model = _model(make_model, "g (float[4] a) => (float[4] y) {\n n = Neg (a)\n y = Abs (n)\n}")
    pat = p.Abs(p.any(p.var("any"), p.Neg(p.var("x"), name="neg")))
    m = match_pattern(pat, _root(model), Trace(), accept=lambda m: m.neg is not None)
    assert m is not None and m.x.name == "a"


def test_private_refuses_a_value_read_twice(make_model):
    model = _model(make_model, "g (float[4] a) => (float[4] y, float[4] n) {\n"
                               " n = Neg (a)\n y = Abs (n)\n}")
    trace = Trace()
    assert match_pattern(p.Abs(p.Neg(p.var("x"), private=True)), _root(model), trace) is None
    assert trace.best.reason.code == "not_private"
    assert match_pattern(p.Abs(p.Neg(p.var("x"))), _root(model), Trace()) is not None


def test_search_leaves_no_bindings_behind_after_a_miss(make_model):
    model = _model(make_model, SHARED_FACTOR)
    x, s = p.var("x"), p.var("s")
    pat = p.Add(p.Mul(x, s), p.Mul(p.Abs(x), s))  # no Abs: no way fits
    assert match_pattern(pat, _root(model), Trace(), exhaustive=True) is None
