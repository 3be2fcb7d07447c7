"""A dim that inference would compute beyond int64 (a product of corrupt dims) is unknown:
no run of the model has it, and protobuf cannot write it (it was an internal error in the
export of a declared value_info, found by fuzz run 41)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline


def _tiled(tmp_path) -> str:
    """``Tile(x, [2**40])`` of an ``x`` declared ``[2**40]``: a dim of 2**80; its output has a
    declared value_info (of unknown dims), so the exporter writes what inference found."""
    repeats = numpy_helper.from_array(np.array([2 ** 40], np.int64), "repeats")
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "repeats"], ["t"]),
         helper.make_node("Shape", ["t"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2 ** 40])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1])], [repeats],
        value_info=[helper.make_tensor_value_info("t", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "tiled.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def test_a_dim_beyond_int64_is_unknown(tmp_path):
    result = run_pipeline(_tiled(tmp_path), OptimizeOptions(target="cpu"))
    (t,) = [v for v in result.proto.graph.value_info if v.name == "t"]
    (dim,) = t.type.tensor_type.shape.dim
    assert not dim.HasField("dim_value")
