"""verify on models with random ops: the same random nodes in both are run with one seed and
compared; outputs a random node reaches that only one model holds are "not compared", never
a mismatch; a model whose every output is random cannot be verified (said, not ok)."""

from __future__ import annotations

import onnx
import pytest

import onnxopt
from onnxopt.verification import NotVerified
from onnxopt.verification.random_ops import node_key, plan_random, seeded

# Noise scaled by an input (a VITS-like sampler), then a reflect Pad that refuses lengths up to
# 40: verify's first attempt (length 7) fails after the noise was drawn, which advanced the
# original's generator and not the optimized model's (the false "mismatch" of before).
NOISE = """
agraph (float[batch, samples] x, float[1] scale) => (float[batch, samples] y,
                                                     float[batch, samples] z) {
  noise = RandomNormalLike <dtype = 1> (x)
  scaled = Mul (noise, scale)
  y = Add (x, scaled)
  pads = Constant <value = int64[4] {0, 40, 0, 40}> ()
  padded = Pad <mode = "reflect"> (x, pads)
  starts = Constant <value = int64[1] {40}> ()
  ends = Constant <value = int64[1] {-40}> ()
  axes = Constant <value = int64[1] {1}> ()
  inner = Slice (padded, starts, ends, axes)
  z = Add (inner, y)
}
"""


def test_the_same_random_node_in_both_models_is_seeded_and_compared(make_model):
    report = onnxopt.verify(make_model(NOISE), make_model(NOISE), runs=3)
    assert report.ok and report.bitwise
    assert report.seeded == ["RandomNormalLike noise"]
    assert all(o.compared for o in report.outputs)
    assert all(r["x"][1] > 40 for r in report.runs)  # retried longer: the generator was used


def test_a_random_node_only_one_model_holds_leaves_its_outputs_uncompared(make_model):
    """The optimized model draws its noise otherwise (RandomUniformLike): y and z depend on it
    and are reported not compared with the reason; an output it does not reach still is."""
    text = NOISE.replace("float[batch, samples] z) {", "float[batch, samples] z, "
                         "float[batch, samples] w) {").replace("  z = Add (inner, y)\n",
                                                              "  z = Add (inner, y)\n"
                                                              "  w = Relu (inner)\n")
    changed = make_model(text.replace("RandomNormalLike <dtype = 1>",
                                      "RandomUniformLike <dtype = 1>"))
    report = onnxopt.verify(make_model(text), changed)
    outputs = {o.name: o for o in report.outputs}
    assert outputs["y"].not_compared == "depends on random op RandomNormalLike (noise)"
    assert outputs["z"].not_compared == "depends on random op RandomNormalLike (noise)"
    assert outputs["w"].compared and outputs["w"].bitwise
    assert report.ok and report.seeded == []
    assert outputs["y"].result == "not compared"
    assert "y: not compared: depends on random op RandomNormalLike (noise)" in report.notes()
    data = report.to_json()
    assert [o["compared"] for o in data["outputs"]] == [False, False, True]


def test_no_comparable_output_is_not_verified_rather_than_ok(make_model):
    text = """
    agraph (float[batch, 4] x) => (float[batch, 4] y) {
      noise = RandomUniformLike <dtype = 1> (x)
      y = Add (x, noise)
    }"""
    changed = make_model(text.replace("RandomUniformLike", "RandomNormalLike"))
    with pytest.raises(NotVerified) as caught:
        onnxopt.verify(make_model(text), changed)
    assert str(caught.value) == ("could not verify: no output can be compared (y depends on "
                                 "random op RandomUniformLike (noise))")
    assert not caught.value.report.ok and len(caught.value.report.runs) == 2


DROPOUT = """
agraph (float[batch, 8] x, bool training) => (float[batch, 8] y) {
  ratio = Constant <value = float {0.5}> ()
  y = Dropout (x, ratio, training)
}
"""


def test_training_mode_dropout_is_random_and_gets_an_int_seed(make_model):
    model = make_model(DROPOUT)
    plan = plan_random(model, make_model(DROPOUT))
    assert plan.seeded_names() == ["Dropout y"] and plan.not_compared == {}
    (seed,) = [a for a in seeded(model, plan.seeds).graph.node[1].attribute if a.name == "seed"]
    assert seed.type == onnx.AttributeProto.INT
    report = onnxopt.verify(make_model(DROPOUT), make_model(DROPOUT), runs=4)
    assert report.ok and report.bitwise  # both branches of the flag, the same mask each run


def test_inference_mode_dropout_is_not_random(make_model):
    text = DROPOUT.replace("bool training) =>", "bool unused) =>").replace(
        "  y = Dropout (x, ratio, training)",
        "  off = Constant <value = bool {0}> ()\n  y = Dropout (x, ratio, off)")
    plan = plan_random(make_model(text), make_model(text))
    assert plan.seeds == {} and plan.not_compared == {}


def test_seeded_and_sampling_ops_keep_or_get_their_seed(make_model):
    text = """
    agraph (float[batch, 4] x) => (float[batch, 4] b, int32[batch, 3] s) {
      p = Sigmoid (x)
      b = Bernoulli (p)
      s = Multinomial <sample_size = 3, seed = 7.0> (x)
    }"""
    plan = plan_random(make_model(text), make_model(text))
    assert plan.seeded_names() == ["Bernoulli b"]  # Multinomial has its own seed already
    copy = seeded(make_model(text), plan.seeds)
    seeds = {n.op_type: [a.f for a in n.attribute if a.name == "seed"] for n in copy.graph.node}
    assert seeds["Bernoulli"] == [1.0] and seeds["Multinomial"] == [7.0]
    report = onnxopt.verify(make_model(text), make_model(text))
    assert report.ok and report.bitwise


def test_a_random_node_in_a_branch_reaches_the_if_outputs(make_model):
    text = """
    agraph (float[4] x, bool c) => (float[4] y, float[4] z) {
      y = If (c) <
        then_branch = g1 () => (float[4] t) { t = RandomNormalLike <dtype = 1> (x) },
        else_branch = g2 () => (float[4] e) { e = Identity (x) }>
      z = Relu (x)
    }"""
    other = text.replace("RandomNormalLike", "RandomUniformLike")
    plan = plan_random(make_model(text), make_model(other))
    assert plan.not_compared == {"y": "depends on random op RandomNormalLike (t)"}
    assert plan.seeds == {}


def test_node_key_is_op_name_and_attributes_not_inputs():
    make = onnx.helper.make_node
    key = node_key(make("RandomNormalLike", ["x"], ["n"], name="noise", dtype=1))
    assert key == node_key(make("RandomNormalLike", ["other"], ["n"], name="noise", dtype=1))
    assert key != node_key(make("RandomNormalLike", ["x"], ["n"], name="noise", dtype=1,
                                scale=2.0))
    assert key != node_key(make("RandomNormalLike", ["x"], ["n"], name="noise2", dtype=1))
    assert node_key(make("RandomNormalLike", ["x"], ["n"], dtype=1))[1] == "n"  # unnamed
