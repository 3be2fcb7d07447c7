"""``evaluation.session``: a model at a path ONNX Runtime's C++ cannot be handed still loads."""

from __future__ import annotations

import numpy as np
import onnx

from onnxopt.evaluation import native_path, run, session

RELU = """
g (float[n] x) => (float[n] y) {
    y = Relu (x)
}"""


def test_a_folder_named_in_bytes_that_are_not_utf8(make_model, tmp_path):
    folder = tmp_path / "caf\udce9"  # the byte 0xE9 on its own (Latin-1), kept as a surrogate
    folder.mkdir()
    path = str(folder / "m.onnx")
    onnx.save(make_model(RELU), path)
    assert not native_path(path) and native_path(str(tmp_path / "m.onnx"))
    (y,) = run(session(path), {"x": np.array([-1.0, 2.0], dtype=np.float32)})
    np.testing.assert_array_equal(y, [0.0, 2.0])

