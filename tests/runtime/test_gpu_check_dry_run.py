"""benchmarks/gpu_check.sh's plumbing without a GPU: both phases' steps run (as dry runs), and
what comes back is two files, a JSON summary and an archive of the logs; a failing step makes
the check fail."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _run(out: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120,
                          check=False, env={**os.environ, "OUT": str(out), **env})


def test_dry_run_brings_back_a_summary_and_an_archive(tmp_path):
    proc = _run(tmp_path / "out", DRY_RUN="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["logs.tar.gz", "summary.json"]  # at most 8 files may come back
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["ok"] and summary["dry_run"] and summary["phase"] == "all"
    assert [s["name"] for s in summary["steps"]] == [
        "environment", "pycuda", "library", "images", "device", "gpu_tests",
        "kernels_vs_torch", "library_overhead"]
    with tarfile.open(tmp_path / "out" / "logs.tar.gz") as archive:
        names = {Path(n).name for n in archive.getnames()}
    assert {"gpu_tests.log", "library_overhead.log", "steps.tsv"} <= names


def test_a_phase_runs_only_its_steps_and_a_failure_fails_the_check(tmp_path):
    proc = _run(tmp_path / "p2", DRY_RUN="1", PHASE="2")
    assert proc.returncode == 0
    steps = json.loads((tmp_path / "p2" / "summary.json").read_text())["steps"]
    assert [s["name"] for s in steps] == ["environment", "kernels_vs_torch", "library_overhead"]
    # not a dry run, with a Python that fails every step: the check fails, and says so
    proc = _run(tmp_path / "bad", PHASE="2", PYTHON="false")
    assert proc.returncode == 1
    summary = json.loads((tmp_path / "bad" / "summary.json").read_text()) \
        if (tmp_path / "bad" / "summary.json").exists() else None
    assert summary is None or not summary["ok"]
    assert "gpu_check:" in proc.stdout
