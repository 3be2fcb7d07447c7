"""The fusion driver: worklist, regions for explain, --only/--disable, rule stamps."""

from __future__ import annotations

import json

import pytest

from onnxopt.errors import UsageError
from onnxopt.fuse import MatchStatus
from onnxopt.importer import import_model
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import explain_model, run_pipeline
from onnxopt.rules.base import Rule

SILU_TWICE = """
g (float[B, 8] x) => (float[B, 8] y) {
    s = Sigmoid (x)
    a = Mul (x, s)
    t = Sigmoid (a)
    y = Mul (a, t)
}
"""


def test_both_chained_blocks_fuse_and_carry_the_rule_name(make_model):
    from onnxopt import normalize
    from onnxopt.legality.target import run_target
    from onnxopt.pipeline import fuse_and_settle

    model = import_model(make_model(SILU_TWICE))
    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    report = fuse_and_settle(model, options, run_target(options, model.opset))
    assert report.count("silu") == 2
    fused = [n for n in model.graph if n.op_type == "SiluFused"]
    assert len(fused) == 2 and {n.created_by for n in fused} == {"silu"}


def test_only_and_disable_switch_rules(make_model):
    proto = make_model(SILU_TWICE)
    off = run_pipeline(proto, OptimizeOptions(target="cpu", disable=frozenset({"silu"})))
    assert off.report.stages["fuse"].count("silu") == 0
    only = run_pipeline(proto, OptimizeOptions(target="cpu", only=frozenset({"silu"})))
    assert only.report.stages["fuse"].count("silu") == 2
    assert set(only.report.stages["fuse"].summary()) == {"silu"}


def test_unknown_rule_is_a_usage_error(make_model):
    with pytest.raises(UsageError, match="unknown rule 'nope'"):
        run_pipeline(make_model(SILU_TWICE), OptimizeOptions(only=frozenset({"nope"})))


def test_explain_cli_lists_regions_and_kernels(models_dir, cli):
    code, out, _ = cli("explain", models_dir / "bert.dynamo.onnx", "--target", "cpu")
    assert code == 0
    assert "fused  attention" in out and "kernel " in out
    code, out, _ = cli("explain", models_dir / "bert.dynamo.onnx", "--rule", "gelu")
    assert code == 0 and "attention" not in out.split("fusion")[0]


# Two SiLUs, each of whose Sigmoid is read outside the match: refused twice for one reason,
# said of two different values.
SILU_READ_OUTSIDE = """
g (float[B, 8] x, float[B, 8] z) => (float[B, 8] y1, float[B, 8] o1, float[B, 8] y2,
                                     float[B, 8] o2) {
    s1 = Sigmoid (x)
    y1 = Mul (x, s1)
    o1 = Neg (s1)
    s2 = Sigmoid (z)
    y2 = Mul (z, s2)
    o2 = Neg (s2)
}
"""


def test_refusals_are_grouped_by_code_not_by_sentence(make_model):
    result = run_pipeline(make_model(SILU_READ_OUTSIDE), OptimizeOptions(target="cpu"))
    report = result.report.stages["fuse"]
    silu = [r for r in report.regions if r.rule == "silu"]
    assert [(r.status, r.code) for r in silu] == [(MatchStatus.REFUSED, "used_outside_match")] * 2
    assert [r.detail.split(" is also used by ")[0] for r in silu] == ["%s1", "%s2"]
    summary = report.summary()["silu"]
    assert summary["codes"] == {"used_outside_match": 2}
    assert len(summary["reasons"]) == 2  # the sentences name the values: they do not group
    assert [r.to_json()["code"] for r in silu] == ["used_outside_match"] * 2


def test_the_report_prints_one_line_per_code(make_model, write_model, tmp_path, cli):
    src = write_model(make_model(SILU_READ_OUTSIDE))
    code, out, _ = cli("optimize", src, "-o", tmp_path / "o.onnx", "--target", "cpu")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("  silu: ")]
    assert len(lines) == 1, out
    assert lines[0].startswith("  silu: %s1 is also used by ")
    assert lines[0].endswith("outside the match  (and 1 more used_outside_match)")


def test_explain_keeps_the_kernels_of_the_rule_it_was_asked_for(make_model):
    result = run_pipeline(make_model(SILU_TWICE), OptimizeOptions(target="cpu"))
    chosen = explain_model(result, "silu").selection.selections
    assert len(chosen) == 2 and {s.rule for s in chosen} == {"silu"}
    assert explain_model(result, "gelu").selection.selections == []


class SaysNoInWords(Rule):
    """A rule that refuses with a bare sentence, as rules once did: no longer a refusal."""

    name = "says_no"
    root = "Relu"

    def pattern(self, p: Builder) -> Pat:
        return p.Relu(p.var("x"))

    def legal(self, m: Match, target):
        return "no"


def test_a_rule_that_refuses_with_a_bare_sentence_is_named(make_model):
    proto = make_model("g (float[2] x) => (float[2] y) {\n y = Relu (x)\n}")
    options = OptimizeOptions(target="cpu", debug=True, extra_rules=(SaysNoInWords(),))
    with pytest.raises(TypeError, match="rule says_no: legal.. returned str"):
        run_pipeline(proto, options)


def test_explain_json_carries_the_code_of_each_region(make_model, write_model, tmp_path, cli):
    src = write_model(make_model(SILU_READ_OUTSIDE))
    code, _, err = cli("explain", src, "--target", "cpu", "--json", tmp_path / "e.json")
    assert code == 0, err
    fusion = json.loads((tmp_path / "e.json").read_text())["fusion"]
    silu = [r for r in fusion["regions"] if r["rule"] == "silu"]
    assert [(r["status"], r["code"]) for r in silu] == [("refused", "used_outside_match")] * 2
    assert fusion["summary"]["silu"]["codes"] == {"used_outside_match": 2}
