"""Quiet success: on every model, ``optimize`` writes its report and nothing else — no line
of ONNX Runtime's own logging (mask probes, load checks, verification run models that may
refuse probe sizes; those refusals are answers, not errors) — and with ``-q`` nothing at
all. Captured at the file-descriptor level, where ORT's C++ logger writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from onnxopt.cli import main

STAGE_LINE = re.compile(r"onnxopt: [a-z_]+\u2026 \d+\.\d s")

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
    # stderr is not a terminal: at most a line for a stage that ran long (on a loaded machine)
    assert all(STAGE_LINE.fullmatch(line) for line in err.splitlines()), err
    assert out.startswith("nodes by op") and "verify: ok" in out


def _optimize_in_a_child(tmp_path, *flags: str, terminal: bool = False) -> list[str]:
    """Runs ``optimize`` in a fresh interpreter (its stdout a terminal of its own where
    ``terminal``); returns the rich modules it ended with."""
    import json
    import os
    import pty
    import subprocess
    import sys

    found = tmp_path / "modules.json"
    code = ("import json, sys\nfrom onnxopt.cli import main\n"
            "code = main(sys.argv[2:])\n"
            "open(sys.argv[1], 'w').write(json.dumps("
            "[code, sorted(m for m in sys.modules if m.split('.')[0] == 'rich')]))")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    primary, secondary = pty.openpty() if terminal else (None, subprocess.DEVNULL)
    child = subprocess.Popen([sys.executable, "-c", code, str(found), "optimize",
                              str(ROOT / "models/gpt2.ts.onnx"), "-o", str(tmp_path / "o.onnx"),
                              "--target", "cpu", *flags],
                             stdout=secondary, stderr=subprocess.DEVNULL, env=env)
    if terminal:
        os.close(secondary)
        try:  # read what it prints, so a full terminal buffer never blocks it
            while os.read(primary, 65536):
                pass
        except OSError:  # the child closed its end
            pass
        os.close(primary)
    assert child.wait(timeout=300) == 0
    exit_code, modules = json.loads(found.read_text())
    assert exit_code == 0
    return modules


def test_quiet_run_never_imports_the_printer(tmp_path):
    """rich is imported (on a thread, while the checks run) only where a report is printed to
    a terminal: a log gets plain lines."""
    assert _optimize_in_a_child(tmp_path, "-q") == []
    assert _optimize_in_a_child(tmp_path) == []
    assert {"rich.console", "rich.table"} <= set(_optimize_in_a_child(tmp_path, terminal=True))


def test_printer_import_starts_once_when_the_checks_begin(monkeypatch):
    from onnxopt.commands import optimize_cmd

    started, seen = [], []
    monkeypatch.setattr(optimize_cmd, "import_rich_meanwhile", lambda: started.append(len(seen)))
    step = optimize_cmd._importing_rich_at_checks(seen.append)
    for name in ("import", "normalize", "checks", "import", "checks", "write"):
        step(name)
    assert seen == ["import", "normalize", "checks", "import", "checks", "write"]
    assert started == [3]  # after the first "checks" was passed on, and only then
