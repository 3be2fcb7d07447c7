"""Every shipped model: the bytes written for a result, with its unchanged weights copied from
the input file, parse to exactly the result's proto. This holds only while no pass changes an
input's TensorProto in place (a pass makes a new tensor instead): a change would leave the
copied bytes saying the old value. The result's proto lacks the raw data the importer left
in the file (``keep_left_out``, as the safeguard runs it): the bytes hold it, and the proto
made whole holds the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import ModelProto

from onnxopt.exporter.serialize import model_parts
from onnxopt.importer.wire import STRIPPED_MIN_BYTES
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline

MODELS = sorted((Path(__file__).resolve().parents[2] / "models").glob("*.onnx"))


@pytest.mark.parametrize("path", MODELS, ids=[p.name for p in MODELS])
def test_written_bytes_are_the_results_proto(path):
    result = run_pipeline(str(path), OptimizeOptions(target="cpu"), keep_left_out=True)
    assert result.encoded, "no weight of the input's kept its bytes"
    if any(len(e) > 2 * STRIPPED_MIN_BYTES for e in result.encoded.values()):
        assert result.left_out, "no raw data was left in the file"
    written = ModelProto.FromString(b"".join(model_parts(result.proto, result.encoded)))
    assert written == result.whole_proto()
    assert not result.left_out


@pytest.mark.parametrize("path", MODELS[:3], ids=[p.name for p in MODELS[:3]])
def test_a_result_not_written_from_its_encodings_holds_its_numbers(path):
    """Without ``keep_left_out`` the result's proto is whole: serialized by protobuf alone, it
    is the model the encoded bytes give."""
    whole = run_pipeline(str(path), OptimizeOptions(target="cpu"))
    assert not whole.left_out
    kept = run_pipeline(str(path), OptimizeOptions(target="cpu"), keep_left_out=True)
    written = ModelProto.FromString(b"".join(model_parts(kept.proto, kept.encoded)))
    assert ModelProto.FromString(whole.proto.SerializeToString()) == written
