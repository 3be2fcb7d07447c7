"""``--bisect`` finds the rewrite that breaks a model: a deliberately wrong rule, injected
through the public rule API, is named with the region it broke and the error, and the
model written without it verifies."""

from __future__ import annotations

import json

import onnx
import pytest

import onnxopt
from onnxopt import fuse
from onnxopt.ir.builder import NodeBuilder
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.options import FusionUnit
from onnxopt.rules.base import Rule
from onnxopt.verification import verify_models

TEXT = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[B, 16] x) => (float[B, 16] y) {
    a = Relu(x)
    b = Neg(a)
    c = Relu(b)
    y = Add(a, c)
}
"""


class WrongRelu(Rule):
    """Relu(Neg(x)) -> Relu(x): wrong on purpose (it should be Relu(-x))."""

    name = "wrong_relu"
    root = "Relu"

    def pattern(self, p: Builder) -> Pat:
        return p.Relu(p.Neg(p.var("x")))

    def rewrite(self, b: NodeBuilder, m: Match, facts):
        return b.op("Relu", m.x)


@pytest.fixture
def relu_model(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save_model(onnx.parser.parse_model(TEXT), path)
    return path


def test_bisect_names_the_wrong_rule_its_region_and_the_error(relu_model, tmp_path):
    found = onnxopt.bisect(str(relu_model), tmp_path / "fixed.onnx", target="cpu",
                           extra_rules=(WrongRelu(),))
    assert [str(u) for u in found.culprits] == ["fuse:wrong_relu@Relu_1"]
    assert found.culprits == [FusionUnit("wrong_relu", "Relu_1")]  # a record, not a string
    assert found.mismatch[0].startswith("y: max abs ")
    assert found.lines()[1] == "bisect: caused by rule wrong_relu at node Relu_1"
    assert verify_models(str(relu_model), str(tmp_path / "fixed.onnx")).ok


def test_optimize_verify_bisect_writes_the_model_without_the_culprit(relu_model, tmp_path, cli,
                                                                     monkeypatch):
    monkeypatch.setattr(fuse, "all_rules", lambda: [WrongRelu()])
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    rc, stdout, err = cli("optimize", relu_model, "-o", out, "--verify", "--bisect",
                          "--target", "cpu", "--json", report)
    assert rc == 0
    assert "bisect: caused by rule wrong_relu at node Relu_1" in stdout
    assert err.startswith("onnxopt: warning: the optimized model differed from")
    data = json.loads(report.read_text())
    # The JSON is about the model written: the one without the culprit, which verifies.
    assert data["written"] is True and data["verify"]["ok"] is True
    assert data["bisect"]["culprits"] == ["fuse:wrong_relu@Relu_1"]
    assert data["bisect"]["mismatch"][0].startswith("y: max abs ")
    assert verify_models(str(relu_model), str(out)).ok
    # without --bisect the same run is a verification failure
    rc, _, err = cli("optimize", relu_model, "-o", out, "--verify", "--target", "cpu", "-q")
    assert rc == 1 and "differs from" in err


def test_verify_bisect_reoptimizes_and_writes_beside(relu_model, tmp_path, cli, monkeypatch):
    monkeypatch.setattr(fuse, "all_rules", lambda: [WrongRelu()])
    bad = tmp_path / "bad.onnx"
    assert cli("optimize", relu_model, "-o", bad, "--target", "cpu", "-q")[0] == 0
    rc, stdout, _ = cli("verify", relu_model, bad, "--bisect")
    assert rc == 1
    assert "bisect: caused by rule wrong_relu at node Relu_1" in stdout
    assert verify_models(str(relu_model), str(tmp_path / "bad.bisect.onnx")).ok


def test_bisect_needs_verify(relu_model, cli):
    rc, _, err = cli("optimize", relu_model, "--bisect")
    assert (rc, err) == (2, ("onnxopt: error: --bisect needs --verify (it looks for the cause "
                            "of a mismatch)\n"))
