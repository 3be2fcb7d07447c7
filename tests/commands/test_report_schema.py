"""The JSON reports are a contract: every command's document follows onnxopt/report.schema.json
(the suite checks every document a command writes in-process: tests/conftest.py), begins with
the schema version and the versions it ran with, and says what the run was asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from onnxopt.commands import json_report

ROOT = Path(__file__).resolve().parent.parent.parent


def errors(validator, data: dict) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(data)]


def test_the_schema_is_the_version_the_commands_write(report_schema):
    assert report_schema.schema["properties"]["schema_version"] == {
        "const": json_report.SCHEMA_VERSION,
        "description": "The version of this schema the document follows."}
    defined = set(report_schema.schema["properties"]["command"]["enum"])
    assert defined == {"optimize", "explain", "verify", "kernels"}


def test_optimize_report_begins_with_versions_target_and_options(models_dir, tmp_path, cli,
                                                                 report_schema):
    report = tmp_path / "r.json"
    code, _, err = cli("optimize", models_dir / "gpt2.ts.onnx", "-o", tmp_path / "o.onnx",
                       "--target", "cpu", "--disable", "gelu", "--verify", "--json", report, "-q")
    assert code == 0, err
    data = json.loads(report.read_text())
    assert errors(report_schema, data) == []
    assert list(data)[:3] == ["schema_version", "command", "versions"]
    assert data["schema_version"] == json_report.SCHEMA_VERSION and data["command"] == "optimize"
    assert data["versions"]["onnx"] == onnx.__version__
    assert data["versions"]["onnxruntime"].count(".") >= 1
    assert data["target"]["device"] == "cpu"
    assert data["target"]["provider"] == "CPUExecutionProvider"
    assert data["options"]["target"] == "cpu" and data["options"]["disable"] == ["gelu"]
    assert data["options"]["tune"] is False and data["options"]["extra_rules"] == []
    # the normalization passes are keyed snake_case, like every other key
    assert "shape_arithmetic" in data["normalize"]
    # the weights' write, the checks and the verification are timed too
    assert {"import", "export", "write", "checks", "verify"} <= set(data["stage_seconds"])


def test_a_round_trip_report_follows_the_schema(models_dir, tmp_path, cli, report_schema):
    report = tmp_path / "r.json"
    code, _, err = cli("optimize", models_dir / "vit.dynamo.onnx", "-o", tmp_path / "o.onnx",
                       "--no-fuse", "--json", report, "-q")
    assert code == 0, err
    data = json.loads(report.read_text())
    assert errors(report_schema, data) == []
    assert data["options"]["fuse"] is False and "fuse" not in data


def test_explain_verify_and_kernels_documents(models_dir, tmp_path, cli, report_schema):
    src = models_dir / "llama.dynamo.onnx"
    code, _, err = cli("explain", src, "--target", "cpu", "--json", tmp_path / "e.json")
    assert code == 0, err
    explained = json.loads((tmp_path / "e.json").read_text())
    assert explained["command"] == "explain" and explained["fusion"]["regions"]
    for region in explained["fusion"]["regions"]:  # a code says why, wherever it did not fuse
        assert (region["code"] is None) == (region["status"] == "fused"), region
    for entry in explained["fusion"]["summary"].values():
        assert sum(entry["codes"].values()) == entry["refused"] + entry["partial"]
    code, _, err = cli("verify", src, src, "--json", tmp_path / "v.json")
    assert code == 0, err
    verified = json.loads((tmp_path / "v.json").read_text())
    assert verified["command"] == "verify" and verified["ok"] is True
    code, out, err = cli("kernels", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert listed["command"] == "kernels" and len(listed["kernels"]) > 10
    for data in (explained, verified, listed):
        assert data["schema_version"] == json_report.SCHEMA_VERSION
        assert errors(report_schema, data) == []


def test_a_key_the_schema_does_not_know_fails_the_suite(report_schema):
    """What the suite's check (tests/conftest.py) catches: an undocumented key, a pass count
    keyed in words rather than snake_case, a document of no known command."""
    base = json_report.document("kernels", {"kernels": []})
    assert errors(report_schema, base) == []
    assert errors(report_schema, {**base, "kernel_count": 0})
    with pytest.raises(AssertionError, match="does not follow report.schema.json"):
        json_report.document("kernels", {"kernels": [], "kernel_count": 0})
    optimize = {"schema_version": 1, "command": "optimize", "versions": base["versions"]}
    assert any("normalize" in e or "shape arithmetic" in e for e in errors(
        report_schema, {**optimize, "normalize": {"shape arithmetic": 3}}))
    assert errors(report_schema, {**base, "command": "frobnicate"})


def test_the_console_script_writes_a_valid_report(models_dir, tmp_path, report_schema):
    """The whole command in a process of its own (``python -m onnxopt``, as CI runs it)."""
    report = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "onnxopt", "optimize",
                           str(models_dir / "bert.ts.onnx"), "-o", str(tmp_path / "o.onnx"),
                           "--json", str(report), "-q"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert errors(report_schema, json.loads(report.read_text())) == []


def test_the_wheel_carries_the_schema():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "report.schema.json" in config["tool"]["setuptools"]["package-data"]["onnxopt"]
    assert any(dep.startswith("jsonschema") for dep in
               config["project"]["optional-dependencies"]["test"])
