"""Shared fixtures: the real exported models, ONNX-text models, and the CLI run in-process.

Fixtures rather than an importable helper module, so tests do not depend on
pytest's import mode. A test that takes a ``model_path`` argument is run once
per file in ``models/`` (see :func:`pytest_generate_tests`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import onnx
import onnx.parser
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "models"
MODEL_PATHS = sorted(MODELS_DIR.glob("*.onnx"))

# onnx 1.23 writes IR version 14 by default, which ONNX Runtime 1.31 refuses to load.
IR_VERSION = 10


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "model_path" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if "model_path" in (names.replace(" ", "").split(",") if isinstance(names, str)
                            else names):
            return  # the test chose its own models
    metafunc.parametrize("model_path", MODEL_PATHS, ids=[p.name for p in MODEL_PATHS])


@pytest.fixture(scope="session")
def models_dir() -> Path:
    return MODELS_DIR


@pytest.fixture(scope="session")
def model_paths() -> list[Path]:
    """Every model in ``models/`` (both exporters of every architecture)."""
    assert MODEL_PATHS, f"no models in {MODELS_DIR}"
    return list(MODEL_PATHS)


def parse_model(text: str, opset: int = 18, ir_version: int = IR_VERSION,
                extra_opsets: dict[str, int] | None = None) -> onnx.ModelProto:
    """A ModelProto from a graph in ONNX text (with or without its ``<...>`` header)."""
    if not text.lstrip().startswith("<"):
        imports = ", ".join([f'"": {opset}'] + [f'"{d}": {v}' for d, v in
                                                (extra_opsets or {}).items()])
        text = f"<ir_version: {ir_version}, opset_import: [{imports}]>\n{text}"
    proto = onnx.parser.parse_model(text)
    proto.ir_version = ir_version
    return proto


@pytest.fixture
def make_model() -> Callable[..., onnx.ModelProto]:
    """``make_model(text, opset=18)``: parse ONNX text into a model ORT can load (IR 10)."""
    return parse_model


@pytest.fixture
def write_model(tmp_path: Path) -> Callable[..., Path]:
    """``write_model(proto_or_text, name="m.onnx")``: save into ``tmp_path``, return the path."""

    def write(model: onnx.ModelProto | str, name: str = "m.onnx", **kwargs) -> Path:
        proto = parse_model(model, **kwargs) if isinstance(model, str) else model
        path = tmp_path / name
        onnx.save_model(proto, path)
        return path

    return write


@pytest.fixture
def cli(capsys: pytest.CaptureFixture) -> Callable[..., tuple[int, str, str]]:
    """``cli("optimize", path, ...)`` runs the command line in-process: (exit code, stdout, stderr)."""
    from onnxopt.cli import main

    def run(*args: str | os.PathLike) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([os.fspath(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def sha256(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def file_hash() -> Callable[[str | os.PathLike], str]:
    return sha256


@pytest.fixture(scope="session")
def report_schema():
    """A validator of onnxopt/report.schema.json (itself checked against JSON Schema 2020-12)."""
    import jsonschema

    from onnxopt.commands import json_report

    schema = json_report.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(autouse=True)
def _json_reports_follow_the_schema(request, monkeypatch):
    """Every JSON document a command writes in this process during the suite (``optimize``,
    ``explain`` and ``verify --json``, ``kernels --json``) is checked against the schema, as
    the file holds it: a key added without being documented fails the test that wrote it."""
    import json

    from onnxopt.commands import json_report

    made = json_report.document

    def checked(command: str, body: dict) -> dict:
        data = made(command, body)
        written = json.loads(json.dumps(data, default=str))
        errors = [f"{e.json_path}: {e.message}"
                  for e in request.getfixturevalue("report_schema").iter_errors(written)]
        assert not errors, f"{command} report does not follow report.schema.json: {errors}"
        return data

    monkeypatch.setattr(json_report, "document", checked)
