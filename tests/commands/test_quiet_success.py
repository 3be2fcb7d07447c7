"""Quiet success: on every model, ``optimize`` writes its report and nothing else — no line
of ONNX Runtime's own logging (mask probes, load checks, verification run models that may
refuse probe sizes; those refusals are answers, not errors) — and with ``-q`` nothing at
all. Captured at the file-descriptor level, where ORT's C++ logger writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxopt.cli import main

ROOT = Path(__file__).resolve().parent.parent.parent
MODELS = sorted(ROOT.glob("models/*.onnx")) + sorted(ROOT.glob("models/other/*.onnx"))


@pytest.mark.parametrize("path", MODELS, ids=[p.name for p in MODELS])
def test_optimize_prints_only_its_report(path, tmp_path, capfd):
    capfd.readouterr()
    assert main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "-q",
                 "--target", "cpu"]) == 0
    assert capfd.readouterr() == ("", "")
    assert main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--target", "cpu",
                 "--verify"]) == 0
    out, err = capfd.readouterr()
    assert err == ""
    assert out.startswith("nodes by op") and "verify: ok" in out
