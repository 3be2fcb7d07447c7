"""Rule names and families: every rule has a name of its own (regions and hold-back units say
which rule they are about); ``--only``/``--disable`` name families, so ``layer_norm`` still
switches both of its spellings."""

from __future__ import annotations

from onnxopt.fuse import selected_rules
from onnxopt.options import OptimizeOptions, RuleUnit
from onnxopt.pipeline import run_pipeline
from onnxopt.rules import all_rules

NATIVE_AND_DECOMPOSED = """
g (float[batch, seq, 8] x, float[8] gamma, float[8] beta) => (float[batch, seq, 8] y,
                                                              float[batch, seq, 8] z) {
    y = LayerNormalization <axis = -1, epsilon = 0.00001> (x, gamma, beta)
    two = Constant <value = float {2.0}> ()
    eps = Constant <value = float {0.00001}> ()
    mean = ReduceMean <axes = [-1]> (x)
    d = Sub (x, mean)
    sq = Pow (d, two)
    var = ReduceMean <axes = [-1]> (sq)
    ve = Add (var, eps)
    std = Sqrt (ve)
    n = Div (d, std)
    s = Mul (n, gamma)
    z = Add (s, beta)
}
"""


def test_every_rule_has_a_name_of_its_own():
    names = [r.name for r in all_rules()]
    assert len(names) == len(set(names))
    spellings = {r.name: r.family for r in all_rules() if r.name != r.family}
    assert spellings == {"layer_norm_op": "layer_norm", "group_norm_op": "group_norm",
                         "group_norm_per_channel": "group_norm",
                         "single_query_attention": "attention",
                         "quantized_attention": "attention"}


def test_a_family_switches_every_spelling():
    only = selected_rules(OptimizeOptions(only=frozenset({"layer_norm"})))
    assert [r.name for r in only] == ["layer_norm_op", "layer_norm"]
    kept = selected_rules(OptimizeOptions(disable=frozenset({"group_norm"})))
    assert not {"group_norm", "group_norm_op", "group_norm_per_channel"} & {r.name for r in kept}
    assert "group_norm_silu" in {r.name for r in kept}
    one = selected_rules(OptimizeOptions(disable=frozenset({"layer_norm_op"})))
    assert {r.name for r in one if r.family == "layer_norm"} == {"layer_norm"}


def test_regions_carry_the_rule_and_the_summary_the_family(make_model):
    proto = make_model(NATIVE_AND_DECOMPOSED, opset=17)
    fusion = run_pipeline(proto, OptimizeOptions(target="cpu")).report.stages["fuse"]
    fused = sorted((r.rule, r.family) for r in fusion.regions if r.status == "fused")
    assert fused == [("layer_norm", "layer_norm"), ("layer_norm_op", "layer_norm")]
    assert fusion.count("layer_norm") == 2 and fusion.summary()["layer_norm"]["fused"] == 2


def test_a_hold_back_unit_names_one_spelling(make_model):
    proto = make_model(NATIVE_AND_DECOMPOSED, opset=17)
    options = OptimizeOptions(target="cpu", hold_back=frozenset({RuleUnit("layer_norm_op")}))
    fusion = run_pipeline(proto, options).report.stages["fuse"]
    assert [r.rule for r in fusion.regions if r.status == "fused"] == ["layer_norm"]
