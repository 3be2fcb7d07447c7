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


def _optimize_in_a_child(tmp_path, *flags: str) -> list[str]:
    """Runs ``optimize`` in a fresh interpreter; returns the rich modules it ended with."""
    import json
    import os
    import subprocess
    import sys

    code = ("import json, sys\nfrom onnxopt.cli import main\n"
            "code = main(sys.argv[1:])\n"
            "print(json.dumps([code, sorted(m for m in sys.modules if m.split('.')[0] == 'rich')]))")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code, "optimize", str(ROOT / "models/gpt2.ts.onnx"),
                           "-o", str(tmp_path / "o.onnx"), "--target", "cpu", *flags],
                          capture_output=True, text=True, env=env, timeout=300, check=True)
    exit_code, modules = json.loads(done.stdout.splitlines()[-1])
    assert exit_code == 0
    return modules


def test_quiet_run_never_imports_the_printer(tmp_path):
    """rich is imported (on a thread, while the checks run) only where a report is printed."""
    assert _optimize_in_a_child(tmp_path, "-q") == []
    assert {"rich.console", "rich.table"} <= set(_optimize_in_a_child(tmp_path))


def test_printer_import_starts_once_when_the_checks_begin(monkeypatch):
    from onnxopt.commands import optimize_cmd

    started, seen = [], []
    monkeypatch.setattr(optimize_cmd, "import_rich_meanwhile", lambda: started.append(len(seen)))
    step = optimize_cmd._importing_rich_at_checks(seen.append)
    for name in ("import", "normalize", "checks", "import", "checks", "write"):
        step(name)
    assert seen == ["import", "normalize", "checks", "import", "checks", "write"]
    assert started == [3]  # after the first "checks" was passed on, and only then
