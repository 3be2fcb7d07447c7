"""Symbolic shape rules checked against the shapes ONNX Runtime produces."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from onnxopt.importer import import_model
from onnxopt.normalize.shapes import infer_shapes


@pytest.mark.parametrize(("batch_dims", "indices", "want"), [
    (0, "int64[n, m, 2] i", ("n", "m", 5)),
    (1, "int64[3, m, 1] i", (3, "m", 5)),
])
def test_gather_nd(make_model, batch_dims, indices, want):
    text = f"""
    g (float[3, 4, 5] d, {indices}) => (float[?] y) {{
        y = GatherND <batch_dims = {batch_dims}> (d, i)
    }}"""
    proto = make_model(text)
    proto.graph.output[0].type.tensor_type.ClearField("shape")
    model = import_model(proto)
    infer_shapes(model)
    (node,) = list(model.graph)
    assert node.output.shape == want
    idx_shape = [2 if d == "n" else 6 if d == "m" else d for d in
                 (3 if batch_dims else "n", "m", 1 if batch_dims else 2)]
    feeds = {"d": np.zeros((3, 4, 5), np.float32),
             "i": np.zeros(idx_shape, np.int64)}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    (got,) = ort.InferenceSession(proto.SerializeToString(), so,
                                  providers=["CPUExecutionProvider"]).run(None, feeds)
    sizes = {"n": 2, "m": 6}
    assert got.shape == tuple(sizes.get(d, d) for d in want)


def test_slice_after_a_symbolic_start(make_model):
    """x[:, past:] with past read from another input's shape: total - past positions."""
    text = """
    g (int64[batch, total] m, float[batch, 4, past, 8] k) => (int64[batch, ?] y)
      <int64[1] two = {2}, int64[1] three = {3}, int64[1] last = {9223372036854775807},
       int64[1] one = {1}> {
        shape = Shape (k)
        past = Slice (shape, two, three)
        y = Slice (m, past, last, one)
    }"""
    model = import_model(make_model(text))
    infer_shapes(model)
    assert model.graph.outputs[0].shape == ("batch", "(total-past)")
