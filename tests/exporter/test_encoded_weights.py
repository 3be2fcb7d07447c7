"""Every shipped model: the bytes written for a result, with its unchanged weights copied from
the input file, parse to exactly the result's proto. This holds only while no pass changes an
input's TensorProto in place (a pass makes a new tensor instead): a change would leave the
copied bytes saying the old value."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import ModelProto

from onnxopt.exporter.serialize import model_parts
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline

MODELS = sorted((Path(__file__).resolve().parents[2] / "models").glob("*.onnx"))


@pytest.mark.parametrize("path", MODELS, ids=[p.name for p in MODELS])
def test_written_bytes_are_the_results_proto(path):
    result = run_pipeline(str(path), OptimizeOptions(target="cpu"))
    assert result.encoded, "no weight of the input's kept its bytes"
    written = ModelProto.FromString(b"".join(model_parts(result.proto, result.encoded)))
    assert written == result.proto
