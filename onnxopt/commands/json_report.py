"""The JSON documents the commands write, as ``onnxopt/report.schema.json`` describes them.

``optimize --json``, ``explain --json``, ``verify --json`` and ``kernels --json`` all begin
with the same keys: ``schema_version``, ``command`` and ``versions`` (of onnxopt, onnx and the
ONNX Runtime the command ran with); the command's own keys follow. CI jobs read these files,
so they are a contract: a change that can break a reader (a key renamed, removed, or of
another type or meaning) raises ``SCHEMA_VERSION``; a key added does not, and readers ignore
keys they do not know. The schema file ships in the wheel (package data).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from onnxopt import __version__, ort_helper

SCHEMA_VERSION = 1
SCHEMA_FILE = "report.schema.json"


def document(command: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a command's report) with the keys every document begins with."""
    return {"schema_version": SCHEMA_VERSION, "command": command, "versions": versions(),
            **body}


def versions() -> dict[str, str | None]:
    """onnxopt's, onnx's and ONNX Runtime's (as the ORT helper loaded it; None where ORT cannot
    be imported) versions."""
    import onnx

    return {"onnxopt": __version__, "onnx": onnx.__version__,
            "onnxruntime": ort_helper.facts().version}


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of every document, from the installed package."""
    return json.loads(resources.files("onnxopt").joinpath(SCHEMA_FILE).read_text())
