"""The checks load a light copy of the staged result (verification/light_copy.py): the same
model, its large raw data referenced in the staged file. It must compute what the staged file
computes, point at exactly the bytes the staged file holds, and leave nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxopt
from onnxopt import evaluation
from onnxopt.exporter.serialize import model_parts
from onnxopt.importer.load import read_model_proto
from onnxopt.importer.wire import STRIPPED_MIN_BYTES
from onnxopt.verification import loadable
from onnxopt.verification.light_copy import LIGHT_SUFFIX, write_light_copy

MODELS = Path(__file__).resolve().parents[2] / "models"


def _staged(proto: onnx.ModelProto, folder: Path) -> tuple[str, dict]:
    layout: dict = {}
    path = str(folder / ".out.onnx.tmp")
    with open(path, "wb") as f:
        f.writelines(model_parts(proto, None, layout))
    return path, layout


def _feeds(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in proto.graph.input:
        dims = [d.dim_value or 3 for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == TensorProto.INT64:
            feeds[vi.name] = rng.integers(0, 50, dims).astype(np.int64)
        else:
            feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", ["bert.ts.onnx", "llama.dynamo.onnx"])
def test_the_light_copy_computes_what_the_staged_file_computes(tmp_path, name):
    optimized = onnxopt.optimize(str(MODELS / name), target="cpu")
    staged, layout = _staged(optimized, tmp_path)
    light = write_light_copy(staged, optimized, layout)
    assert light == staged + LIGHT_SUFFIX
    assert os.path.getsize(light) < os.path.getsize(staged) / 4
    feeds = _feeds(optimized)
    for a, b in zip(evaluation.session(staged).run(None, feeds),
                    evaluation.session(light).run(None, feeds), strict=True):
        np.testing.assert_array_equal(a, b)
    assert loadable.native_checks(optimized, light) == {"checker": None, "loads": None,
                                                         "loads_unoptimized": None}


def test_each_reference_is_the_staged_files_raw_data(tmp_path):
    proto = read_model_proto(str(MODELS / "bert.ts.onnx"))
    staged, layout = _staged(proto, tmp_path)
    light = onnx.load(write_light_copy(staged, proto, layout), load_external_data=False)
    data = Path(staged).read_bytes()
    referenced = 0
    for original, t in zip(proto.graph.initializer, light.graph.initializer, strict=True):
        if t.data_location != TensorProto.EXTERNAL:
            assert t == original
            assert len(original.raw_data) < STRIPPED_MIN_BYTES or not original.HasField("raw_data")
            continue
        info = {e.key: e.value for e in t.external_data}
        assert info["location"] == os.path.basename(staged)
        offset, length = int(info["offset"]), int(info["length"])
        assert data[offset:offset + length] == original.raw_data
        referenced += 1
    assert referenced > 10


def test_a_model_without_large_raw_data_has_no_light_copy(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.ones(4, np.float32), "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 9
    staged, layout = _staged(proto, tmp_path)
    assert write_light_copy(staged, proto, layout) is None
    assert os.listdir(tmp_path) == [os.path.basename(staged)]


def test_a_refusal_read_from_the_light_copy_names_the_result(tmp_path):
    """A model ORT refuses (an op it has no kernel for) is refused the same through the light
    copy, and the message names neither temporary file."""
    w = numpy_helper.from_array(np.ones(STRIPPED_MIN_BYTES, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("NoSuchOp", ["x", "w"], ["y"], domain="no.such")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [STRIPPED_MIN_BYTES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [STRIPPED_MIN_BYTES])], [w])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("no.such", 1)])
    proto.ir_version = 9
    staged, layout = _staged(proto, tmp_path)
    found = loadable.fitness(proto, staged=staged, layout=layout)
    assert found.loads is not None and "ONNX Runtime cannot load it" in found.loads
    assert ".tmp" not in found.loads and LIGHT_SUFFIX not in found.loads
    assert found.loads == loadable.fitness(proto, staged=staged).loads
    assert os.listdir(tmp_path) == [os.path.basename(staged)]  # the light copy is gone


def test_optimize_leaves_only_its_output(tmp_path):
    out = tmp_path / "out.onnx"
    onnxopt.optimize(str(MODELS / "bert.ts.onnx"), str(out), target="cpu")
    assert os.listdir(tmp_path) == ["out.onnx"]
