"""The pattern language: bindings, commutativity, shared sub-patterns, dims, best partial match."""

from __future__ import annotations

from onnxopt.importer import import_model
from onnxopt.match.pattern import Builder, Trace, match_pattern
from onnxopt.normalize.shapes import infer_shapes

p = Builder()


def _model(make_model, body: str, inputs="float[B, S, 8] x", outputs="float[B, S, 8] y"):
    model = import_model(make_model(f"g ({inputs}) => ({outputs}) {{\n{body}\n}}"))
    infer_shapes(model)
    return model


def _root(model, name="y"):
    return next(n for n in model.graph if n.outputs[0].name == name)


def test_silu_binds_the_same_value_twice(make_model):
    model = _model(make_model, "s = Sigmoid (x)\n y = Mul (s, x)")
    x = p.var("x")
    m = match_pattern(p.Mul(x, p.Sigmoid(x, name="sig"), name="mul"), _root(model), Trace())
    assert m is not None and m.x.name == "x" and m.sig.op_type == "Sigmoid"
    assert {n.op_type for n in m.nodes} == {"Mul", "Sigmoid"}


def test_a_different_value_in_the_second_place_does_not_match(make_model):
    model = _model(make_model, "s = Sigmoid (x)\n z = Neg (x)\n y = Mul (s, z)")
    x = p.var("x")
    trace = Trace()
    assert match_pattern(p.Mul(x, p.Sigmoid(x)), _root(model), trace) is None
    assert "should be the same value as" in str(trace.best.reason)
    assert trace.best.reason.code == "not_the_same_value"


def test_constant_value_with_tolerance_and_reason(make_model):
    model = _model(make_model, "c = Constant <value = float {0.6}> ()\n y = Mul (x, c)")
    trace = Trace()
    assert match_pattern(p.Mul(p.var("x"), p.const(value=0.5)), _root(model), trace) is None
    assert str(trace.best.reason) == "constant %c is 0.6, expected 0.5"
    assert (trace.best.reason.code, trace.best.reason.subject) == ("constant_value", "%c")
    assert match_pattern(p.Mul(p.var("x"), p.const(value=0.6)), _root(model), Trace())


def test_optional_part_and_alternatives(make_model):
    model = _model(make_model, "y = Relu (x)")
    x = p.var("x")
    pat = p.Relu(p.optional(p.Neg(x, name="neg"), x))
    m = match_pattern(pat, _root(model), Trace())
    assert m is not None and m.neg is None and m.x.name == "x"


def test_shape_variables_unify_across_the_match(make_model):
    model = _model(make_model, "y = Add (x, z)", inputs="float[B, S, 8] x, float[B, T, 8] z")
    ok = p.Add(p.var("a", dims=("B", "S", "D")), p.var("b", dims=("B", "S", "D")))
    trace = Trace()
    assert match_pattern(ok, _root(model), trace) is None
    assert "dimension S is T here but S elsewhere" in str(trace.best.reason)
    assert trace.best.reason.code == "dimension_mismatch"


def test_best_partial_match_is_the_deepest(make_model):
    model = _model(make_model, "a = Exp (x)\n y = Add (a, x)")
    trace = Trace()
    pat = p.any(p.Add(p.Log(p.var("x")), p.var("z")), p.Mul(p.var("x"), p.var("z")))
    assert match_pattern(pat, _root(model), trace) is None
    assert trace.best.progress == 1
    assert str(trace.best.reason) == "%a: expected Log, found Exp"
    assert (trace.best.reason.code, trace.best.reason.subject) == ("wrong_op", "%a")
