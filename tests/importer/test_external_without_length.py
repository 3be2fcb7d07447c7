"""External tensors without a ``length``: ONNX Runtime reads the bytes the type and shape
need from the offset, not the rest of the file; onnxopt must read (and write) the same."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from onnxopt.importer.load import read_model_proto, read_model_with_data, tensor_bytes


def _model_with_unlengthed_weight(folder) -> tuple[str, np.ndarray]:
    weight = np.arange(12, dtype=np.float32).reshape(3, 4)
    (folder / "weights.bin").write_bytes(weight.tobytes() + b"trailing bytes, not the tensor's")
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3, 4],
                    data_location=TensorProto.EXTERNAL)
    w.external_data.add(key="location", value="weights.bin")
    w.external_data.add(key="offset", value="0")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    return str(path), weight


def test_read_with_data_takes_the_bytes_the_shape_needs(tmp_path) -> None:
    path, weight = _model_with_unlengthed_weight(tmp_path)
    proto = read_model_with_data(path)
    got = onnx.numpy_helper.to_array(proto.graph.initializer[0])
    np.testing.assert_array_equal(got, weight)


def test_its_weight_counts_the_bytes_the_shape_needs(tmp_path) -> None:
    path, weight = _model_with_unlengthed_weight(tmp_path)
    assert tensor_bytes(read_model_proto(path)) == weight.nbytes


def test_optimized_output_loads_and_computes_the_same(tmp_path, cli) -> None:
    path, _ = _model_with_unlengthed_weight(tmp_path)
    out = tmp_path / "out" / "model.opt.onnx"
    out.parent.mkdir()
    code, _, err = cli("optimize", path, "-o", out, "-q")
    assert code == 0, err
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(want[0], got[0])
