"""Symbolic shape rules checked against the shapes ONNX Runtime produces."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from onnxopt.importer import import_model
from onnxopt.ir import symdim as sd
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


# PyTorch's F.pad(x, [a, b]) with amounts computed at run time, as its TorchScript exporter
# spells it: the amounts (last axis first, in pairs) reshaped to [-1, 2], the pairs reversed,
# transposed and flattened into ONNX's [begins..., ends...]. VITS pads its relative-position
# table of 2·window + 1 rows by seq − window − 1 on both sides, to 2·seq − 1 rows.
TORCH_PAD = """
g (float[1, 9, 4] table, float[batch, seq] x) => (float[1, ?, 5] y)
  <int64[1] zero = {0}, int64[1] one = {1}, int64[1] two = {2}, int64[1] five = {5},
   int64[2] pairs = {-1, 2},
   int64[1] minus1 = {-1}, int64[1] rows_end = {-9223372036854775807}, int64[1] flat = {-1}> {
    shape = Shape (x)
    seq = Slice (shape, one, two)
    amount = Sub (seq, five)
    amounts = Concat <axis = 0> (one, zero, amount, amount, zero, zero)
    table2 = Reshape (amounts, pairs)
    reversed = Slice (table2, minus1, rows_end, zero, minus1)
    columns = Transpose <perm = [1, 0]> (reversed)
    pads = Reshape (columns, flat)
    y = Pad <mode = "constant"> (table, pads)
}"""


def test_pad_by_amounts_computed_through_a_table(make_model):
    """The amounts' contents are followed through the [3, 2] table (reversed, transposed): the
    Pad's rows are 9 + 2·(seq − 5) = 2·seq − 1, its columns 4 + 1 (the last axis's pair comes
    first in PyTorch's list), and ONNX Runtime agrees."""
    proto = make_model(TORCH_PAD, opset=17)
    model = import_model(proto)
    infer_shapes(model)
    pads = next(n for n in model.graph if n.op_type == "Pad")
    assert pads.output.shape == (1, "(2*seq-1)", 5)
    assert pads.inputs[1].sym == (0, "(seq-5)", 1, 0, "(seq-5)", 0)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for seq in (6, 11):
        (got,) = session.run(None, {"table": np.ones((1, 9, 4), np.float32),
                                    "x": np.zeros((2, seq), np.float32)})
        assert got.shape == (1, 2 * seq - 1, 5)


def test_a_table_is_not_read_as_a_list(make_model):
    """Rules other than the layout ones (Reshape, Transpose, Slice, ...) do not take a [2, 2]
    table's flat contents for a list: Gather on axis 0 picks rows, not elements."""
    text = """
    g (float[batch, seq] x) => (int64[?] y, int64[2] z)
      <int64[2] rows = {2, 2}, int64[1] first = {0}> {
        shape = Shape (x)
        four = Concat <axis = 0> (shape, shape)
        table = Reshape (four, rows)
        y = Gather <axis = 0> (table, first)
        z = Shape (table)
    }"""
    model = import_model(make_model(text))
    infer_shapes(model)
    table = next(n for n in model.graph if n.op_type == "Reshape").output
    assert table.sym == ("batch", "seq", "batch", "seq")
    y, z = model.graph.outputs
    assert y.sym is None
    assert z.sym == (2, 2)  # (a table's shape is read all the same)


def test_pad_without_known_amounts_keeps_the_rank(make_model):
    text = """
    g (float[batch, seq] x, int64[4] p) => (float[?, ?] y) {
        y = Pad (x, p)
    }"""
    model = import_model(make_model(text))
    infer_shapes(model)
    shape = model.graph.outputs[0].shape
    assert len(shape) == 2 and all(sd.is_fresh(d) for d in shape)  # (unknown, named apart)


def test_max_with_zero_keeps_the_other_amounts_known(make_model):
    """``max(seq − 5, 0)`` (the dynamo export's pad amount) is unknown, an element at a time: the
    pad list's zeros stay known, so the axes padded by 0 keep their dims. ``Max(0, seq)`` is
    ``seq`` (a dim is never negative), ``Min(0, seq)`` is 0."""
    text = """
    g (float[1, 9, 4] table, float[batch, seq] x) => (float[?, ?, ?] y, int64[2] z)
      <int64[1] zero = {0}, int64[1] one = {1}, int64[1] two = {2}, int64[1] five = {5}> {
        shape = Shape (x)
        seq = Slice (shape, one, two)
        amount = Sub (seq, five)
        padded = Max (amount, zero)
        pads = Concat <axis = 0> (zero, padded, zero, zero, padded, zero)
        y = Pad (table, pads)
        high = Max (zero, seq)
        low = Min (seq, zero)
        z = Concat <axis = 0> (high, low)
    }"""
    model = import_model(make_model(text))
    infer_shapes(model)
    y, z = model.graph.outputs
    assert y.shape[0] == 1 and y.shape[2] == 4 and sd.is_fresh(y.shape[1])
    assert z.sym == ("seq", 0)
