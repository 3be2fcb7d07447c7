"""``optimize --verify`` puts a result at ``-o`` only once it verifies (issue 29): after a
mismatch the known-bad model used to stay there for the next CI step to pick up. With
``--bisect`` the model written is the one without the culprit, and the exit code, the text
and the JSON all tell that one story. A deliberately wrong rule makes the mismatch."""

from __future__ import annotations

import json

import onnx
import pytest

from onnxopt import fuse
from onnxopt.ir.builder import NodeBuilder
from onnxopt.match.pattern import Builder, Match, Pat
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
def model(tmp_path, monkeypatch):
    """The model, with the wrong rule as the only one the command line runs."""
    monkeypatch.setattr(fuse, "all_rules", lambda: [WrongRelu()])
    path = tmp_path / "m.onnx"
    onnx.save_model(onnx.parser.parse_model(TEXT), path)
    return path


def test_a_mismatch_writes_nothing_and_says_so(cli, model, tmp_path):
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    code, stdout, err = cli("optimize", model, "-o", out, "--verify", "--target", "cpu",
                            "--json", report)
    assert code == 1
    assert err == (f"onnxopt: error: optimized model differs from {model} beyond tolerance: "
                   f"y; {out} was not written\n")
    assert f"wrote nothing ({out} was not written" in stdout and f"wrote {out}\n" not in stdout
    assert "verify: FAILED" in stdout
    data = json.loads(report.read_text())
    assert data["written"] is False and data["verify"]["ok"] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "r.json"]


def test_a_mismatch_keeps_what_was_at_the_output_before(cli, model, tmp_path, file_hash):
    """The previous good result stays; no trial folder or temporary file is left."""
    out = tmp_path / "o.onnx"
    out.write_bytes(b"the previous result")
    digest = file_hash(out)
    code, _, _ = cli("optimize", model, "-o", out, "--verify", "--target", "cpu", "-q")
    assert code == 1
    assert file_hash(out) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx"]


def test_bisect_tells_one_story_about_the_model_it_writes(cli, model, tmp_path):
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    code, stdout, err = cli("optimize", model, "-o", out, "--verify", "--bisect",
                            "--target", "cpu", "--json", report)
    assert code == 0
    assert err.startswith("onnxopt: warning: the optimized model differed from")
    # In order: the first result's mismatch, its culprit, then the model written.
    failed = stdout.index("verify: FAILED")
    culprit = stdout.index("bisect: caused by rule wrong_relu at node Relu_1")
    assert failed < culprit < stdout.index(f"wrote {out}")
    assert stdout.rstrip().endswith(f"wrote {out}")
    data = json.loads(report.read_text())
    assert data["written"] is True and data["verify"]["ok"] is True
    assert data["bisect"]["culprits"] == ["fuse:wrong_relu@Relu_1"]
    assert data["bisect"]["mismatch"][0].startswith("y: max abs ")
    # The report is that model's: the wrong rewrite is not in it.
    assert data["nodes_after"].get("Neg") == 1
    assert verify_models(str(model), str(out)).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx", "r.json"]


def test_verify_bisect_of_a_model_onnxopt_does_not_make_says_only_that(cli, tmp_path,
                                                                       monkeypatch):
    """``verify orig bad --bisect`` where onnxopt's own result verifies used to print
    ``the optimized model differs ()`` and then that it verifies."""
    orig, bad = tmp_path / "m.onnx", tmp_path / "bad.onnx"
    onnx.save_model(onnx.parser.parse_model(TEXT), orig)
    onnx.save_model(onnx.parser.parse_model(TEXT.replace("c = Relu(b)", "c = Relu(a)")), bad)
    code, stdout, _ = cli("verify", orig, bad, "--bisect")
    assert code == 1
    lines = [line for line in stdout.splitlines() if line.startswith("bisect:")]
    assert lines == ["bisect: optimized anew, the model verifies: there is nothing to bisect"]


def test_the_error_names_a_kernel_chosen_with_an_assumption():
    """A mismatch where a chosen kernel is not exact for every input (the flash kernel's rows
    that see no key) names it in the one error line a CI log keeps."""
    from onnxopt.commands.optimize_cmd import _assumed

    class Select:
        def assumptions(self):
            return {"pycuda.flash_attention_f32": "a query that sees no key gives 0"}

    assert _assumed(Select()) == (" (pycuda.flash_attention_f32 was chosen assuming that a "
                                  "query that sees no key gives 0)")
    assert _assumed(None) == ""
