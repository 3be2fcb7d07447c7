"""The writer's temporary files: made empty, and written without being truncated."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxopt.exporter import save


def _model(size: int) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.arange(size, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])],
                              [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def opened_flags(monkeypatch):
    """The flags of every file the writer opens (``os.open``'s, or what ``open``'s mode means)."""
    flags: list[int] = []
    real = os.open

    def spy(path, flag, *args, **kwargs):
        flags.append(flag)
        return real(path, flag, *args, **kwargs)

    def open_spy(file, mode="r", *args, **kwargs):  # open(): "w" truncates, "x" does not
        if "w" in mode:
            flags.append(os.O_WRONLY | os.O_TRUNC)
        return open(file, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    monkeypatch.setattr(save, "open", open_spy, raising=False)
    return flags


@pytest.mark.parametrize("how", ["staged", "inline", "external"])
def test_no_file_is_truncated_as_it_is_opened(tmp_path, opened_flags, how):
    """A file truncated to nothing is written out to disk as it is closed on ext4 (its
    ``auto_da_alloc``): 45 ms of the 24-layer GPT-2's output. The temporary file is new and
    empty, so it is opened as it is; what is written is the model all the same."""
    model = _model(4096)
    path = str(tmp_path / "m.onnx")
    if how == "staged":
        save.stage_bytes([model.SerializeToString()], path).commit()
    else:
        save.save_model(model, {}, path, use_external=how == "external")
    written = [f for f in opened_flags if f & (os.O_WRONLY | os.O_RDWR)]
    assert written and not any(f & os.O_TRUNC for f in written)
    assert onnx.load(path) == model if how != "external" else (
        numpy_helper.to_array(onnx.load(path).graph.initializer[0]).tolist()
        == list(range(4096)))
    assert sorted(os.listdir(tmp_path)) == (["m.onnx"] if how != "external"
                                            else ["m.onnx", "m.onnx.data"])
