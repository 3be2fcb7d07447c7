"""When the safeguard holds something back, the report says what was lost, per rule, and why
(``safeguard:`` lines and ``--json``'s ``lost``), and ``explain`` says of the same regions what
``optimize`` did: held back, with the reason. The reproduction: the real attention rule on
the shipped LLaMA, its rewrite followed by a node ONNX Runtime refuses to load (a ``Neg`` on
uint8, which the ONNX checker, without type inference, lets through)."""

from __future__ import annotations

import json

import onnxruntime as ort
import pytest
from onnx import TensorProto

import onnxopt
from onnxopt import fuse
from onnxopt.fuse import HELD_BACK_CODE
from onnxopt.ir.dtypes import dtype_code
from onnxopt.options import FusionUnit, OptimizeOptions, PassUnit, RuleUnit
from onnxopt.rules import all_rules
from onnxopt.rules.attention import Attention
from onnxopt.safeguard import loss, safeguard_lines

REFUSAL = "ONNX Runtime cannot load it: "


class RefusedAttention(Attention):
    """The attention rule, its output then cast to uint8 and negated: ORT refuses the type."""

    def rewrite(self, b, m, facts):
        out = super().rewrite(b, m, facts)
        back = dtype_code(m.v.dtype)
        return b.op("Cast", b.op("Neg", b.op("Cast", out, to=TensorProto.UINT8)), to=back)


@pytest.fixture
def refuse_attention(monkeypatch):
    """Call it to replace the attention rule with :class:`RefusedAttention`."""

    def refuse() -> None:
        monkeypatch.setattr(fuse, "all_rules", lambda: [
            RefusedAttention() if r.name == "attention" else r for r in all_rules()])

    return refuse


@pytest.fixture
def refused_attention(refuse_attention):
    refuse_attention()


@pytest.fixture
def llama(models_dir):
    return models_dir / "llama.dynamo.onnx"


def _attention_roots(path) -> set[str]:
    fusion = onnxopt.explain(path, target="cpu").fusion
    return {r.root for r in fusion.regions if r.rule == "attention" and r.status == "fused"}


def test_optimize_names_each_fusion_held_back_per_rule_with_the_reason(
        llama, tmp_path, cli, refuse_attention):
    roots = _attention_roots(llama)
    assert len(roots) == 2
    refuse_attention()
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    rc, stdout, _ = cli("optimize", llama, "-o", out, "--target", "cpu", "--json", report)
    assert rc == 0
    lines = [line for line in stdout.splitlines() if line.startswith("safeguard:")]
    assert len(lines) == 1
    assert lines[0].startswith(
        f"safeguard: held back 2 attention fusions (rule attention): {REFUSAL}")
    assert "Neg" in lines[0]
    data = json.loads(report.read_text())
    guard = data["safeguard"]
    assert guard["fallback"] == "partial"
    lost = guard["lost"]
    assert [(e["kind"], e["rule"], e["held_back"]) for e in lost] == [
        ("fusion", "attention", True)] * 2
    assert all(e["reason"].startswith(REFUSAL) and e["unit"] == f"fuse:attention@{e['root']}"
               and e["lost"].startswith(f"the attention fusion at node {e['root']} (")
               for e in lost)
    assert {e["root"] for e in lost} == roots
    assert sorted(guard["held_back"]) == sorted(e["unit"] for e in lost)
    summary = data["fuse"]["summary"]
    assert (summary["attention"]["fused"], summary["attention"]["refused"]) == (0, 2)
    assert summary["rms_norm"]["fused"] > 0  # the rest of the optimization is kept
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])


def test_explain_says_held_back_where_optimize_held_back(llama, tmp_path, cli,
                                                         refused_attention):
    report = tmp_path / "explain.json"
    rc, stdout, _ = cli("explain", llama, "--target", "cpu", "--json", report)
    assert rc == 0
    assert f"safeguard: held back 2 attention fusions (rule attention): {REFUSAL}" in stdout
    data = json.loads(report.read_text())
    attention = [r for r in data["fusion"]["regions"] if r["rule"] == "attention"]
    assert len(attention) == 2
    for r in attention:
        assert r["status"] == "refused"
        assert r["detail"].startswith(f"held back by the safeguard: with this fusion, {REFUSAL}")
        assert r["code"] == HELD_BACK_CODE == "held_back"
    assert {e["root"] for e in data["safeguard"]["lost"]} == {r["root"] for r in attention}
    # What optimize writes is what explain says: the same decision, region by region.
    optimized = tmp_path / "r.json"
    cli("optimize", llama, "-o", tmp_path / "o.onnx", "--target", "cpu", "--json", optimized,
        "-q")
    assert json.loads(optimized.read_text())["fuse"] == data["fusion"]
    # The Python API's explain is the same run.
    explained = onnxopt.explain(llama, target="cpu")
    assert explained.fusion.to_json() == data["fusion"]
    assert explained.safeguard["fallback"] == "partial"


def test_without_a_refusal_explain_says_fused(llama):
    explained = onnxopt.explain(llama, target="cpu")
    assert explained.fusion.count("attention") == 2
    assert explained.safeguard == {"checks": "passed"}


def test_a_fusion_lost_to_a_pass_held_back_is_named_with_that_pass():
    """A held-back pass can keep a region of another rule from matching: that fusion is
    listed as lost (``held_back`` false), said with the pass and its reason."""
    summary = {"checks": "failed, then passed", "problem": "P", "fallback": "partial",
               "held_back": ["pass:p"],
               "lost": [loss(PassUnit("p"), "the ONNX checker refuses it: X"),
                        loss(FusionUnit("attention", "a"), "not fused once normalization pass "
                             "p ... was held back: the ONNX checker refuses it: X",
                             held_back=False)]}
    lines = safeguard_lines(summary)
    assert lines[0].startswith("safeguard: held back normalization pass p (switched off for "
                               "the whole model")
    assert lines[1] == ("safeguard: held back 1 attention fusion (rule attention): not fused "
                        "once normalization pass p ... was held back: the ONNX checker refuses "
                        "it: X")


def test_a_fallback_says_what_was_written_after_what_was_lost():
    summary = {"checks": "failed, then passed", "problem": "Q", "fallback": "round trip",
               "held_back": ["fuse:gelu@g1", "fuse:gelu@g2", "pass:p"],
               "lost": [loss(FusionUnit("gelu", "g1"), "Q"), loss(FusionUnit("gelu", "g2"), "Q"),
                        loss(PassUnit("p"), "Q")]}
    assert safeguard_lines(summary) == [
        "safeguard: held back 2 gelu fusions (rule gelu): Q",
        ("safeguard: held back normalization pass p (switched off for the whole model: a pass "
         "cannot be switched off per region): Q"),
        "safeguard: wrote the model without any rewrite (a plain round trip): Q"]
    assert safeguard_lines({"checks": "passed"}) == []
    assert safeguard_lines({"checks": "not loaded: why"}) == ["safeguard: not loaded: why"]


def test_units_are_records_printed_as_before():
    """A held-back unit is a record; reports print it as ``fuse:RULE@ROOT`` and the
    ``lost`` entry carries its fields, so nothing reads a unit back from its string."""
    region, rule, pass_ = FusionUnit("gelu", "Mul_3"), RuleUnit("gelu"), PassUnit("p")
    assert [str(u) for u in (region, rule, pass_)] == ["fuse:gelu@Mul_3", "rule:gelu", "pass:p"]
    assert loss(region, "Q") == {"unit": "fuse:gelu@Mul_3", "kind": "fusion", "rule": "gelu",
                                 "root": "Mul_3", "pass": None,
                                 "lost": "the gelu fusion at node Mul_3", "reason": "Q",
                                 "held_back": True}
    assert (loss(rule, "Q")["kind"], loss(rule, "Q")["rule"]) == ("rule", "gelu")
    assert loss(rule, "Q")["lost"] == "rule gelu (everywhere)"
    options = OptimizeOptions(hold_back=frozenset({region}))
    assert options.skips_region("gelu", "Mul_3") and not options.skips_region("gelu", "Mul_4")
    assert OptimizeOptions(hold_back=frozenset({rule})).skips_region("gelu", "Mul_4")
    assert OptimizeOptions(hold_back=frozenset({pass_})).skips_pass("p")
