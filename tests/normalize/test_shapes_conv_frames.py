"""Shape inference through a speech front end: convolutions keep batch and channels and
derive the frame count from the audio length (``samples//10 - 1`` after strides 5 and 2), the
same symbol the model's own length arithmetic (``samples // 10 - 1``) computes; a flip
(``Slice`` with step -1) and ``x[:-1]`` keep what they can prove. Each shape is checked
against ONNX Runtime at several lengths."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from onnxopt.importer import import_model
from onnxopt.ir import symdim as sd
from onnxopt.normalize.shapes import infer_shapes

FRONT_END = """
g (float[batch, samples] x) => (float[batch, 8, ?] y, float[batch, ?] flipped,
                                float[batch, 8, ?] same, int64[1] frames)
  <float[8, 1, 10] w0 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
   int64[1] one = {1}, int64[1] minus_one = {-1}, int64[1] zero = {0},
   int64[1] two = {2}, int64[1] lowest = {-9223372036854775807}, int64 ten = {10}> {
    x3 = Unsqueeze (x, one)
    c0 = Conv <kernel_shape = [10], strides = [5]> (x3, w0)
    w1 = ConstantOfShape <value = float[1] {0.125}> (shape8x8x3)
    shape8x8x3 = Constant <value = int64[3] {8, 8, 3}> ()
    y = Conv <kernel_shape = [3], strides = [2]> (c0, w1)
    w2 = ConstantOfShape <value = float[1] {0.25}> (shape8x2x4)
    shape8x2x4 = Constant <value = int64[3] {8, 2, 4}> ()
    grown = Conv <kernel_shape = [4], pads = [2, 2], group = 4> (y, w2)
    same = Slice (grown, zero, minus_one, two, one)
    row = ReduceSum <keepdims = 0> (y, one)
    flipped = Slice (row, minus_one, lowest, one, minus_one)
    xs = Shape (x)
    n = Gather <axis = 0> (xs, one)
    tenth = Div (n, ten)
    f = Sub (tenth, one)
    frames = Reshape (f, minus_one)
}
"""


def test_conv_frames_and_flip_are_proved_and_match_ort(make_model):
    proto = make_model(FRONT_END)
    model = import_model(proto)
    infer_shapes(model)
    frames = "(samples//10-1)"
    shapes = {v.name: v.shape for v in model.graph.outputs}
    assert shapes["y"] == ("batch", 8, frames)
    assert shapes["same"] == ("batch", 8, frames)  # kernel 4, pads 2+2: one more, dropped
    assert shapes["flipped"] == ("batch", frames)
    assert model.graph.outputs[3].sym == (frames,)  # the model's own count: the same symbol
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for batch, samples in ((1, 20), (2, 29), (3, 400), (2, 641)):
        y, flipped, same, counted = sess.run(
            None, {"x": np.zeros((batch, samples), np.float32)})
        size = sd.evaluate(frames, {"batch": batch, "samples": samples})
        assert y.shape == (batch, 8, size) == same.shape
        assert flipped.shape == (batch, size)
        assert counted.tolist() == [size]


@pytest.mark.parametrize(("a", "s", "want"), [
    ("samples", 5, "samples//5"),
    ("samples//5", 2, "samples//10"),
    ("(samples-10)", 5, "(samples//5-2)"),
    ("(samples//5-4)", 2, "(samples//10-2)"),
    ("4*n", 2, "2*n"),
    ("(samples-9)", 5, None),   # not a multiple of the stride: not written
    ("(a+b)", 2, None),
    ("(past-seq)", 2, None),    # a difference may be negative: floor is not truncation
    (17, 5, 3),
])
def test_floordiv(a, s, want):
    assert sd.floordiv(a, s) == want


def test_evaluate_reads_a_floor_symbol():
    assert sd.evaluate("(samples//10-1)", {"samples": 641}) == 63
    assert sd.evaluate("3*samples//5", {"samples": 12}) == 6
