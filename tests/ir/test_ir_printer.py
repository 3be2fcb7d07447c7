"""The printer's text is stable: tests and ``onnxopt ir`` both rely on it."""

from __future__ import annotations

import textwrap

from onnxopt.importer import import_model
from onnxopt.ir.printer import format_graph, format_node

SMALL = """
agraph (int64[batch, seq] ids) => (float[batch, seq, 1] out)
  <float[3, 2] emb = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, int64[1] axes = {-1},
   float[2, 8] big = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}> {
  h = Gather <axis = 0> (emb, ids)
  s = Softmax <axis = -1> (h)
  half = Constant <value_float = 0.5> ()
  p = MatMul (s, big)
  r = ReduceMean <keepdims = 1> (p, axes)
  out = Mul (r, half)
}
"""

EXPECTED = """\
graph agraph(%ids: int64[batch, seq]) -> (%out: float32[batch, seq, 1]) {
  %emb = const float32[3, 2] [1, 2, 3, 4, 5, 6]
  %axes = const int64[1] [-1]
  %big = const float32[2, 8]
  %half = const float32[] [0.5]
  %h: float32[batch, seq, 2] = Gather(%emb, %ids) {axis=0}
  %s: float32[batch, seq, 2] = Softmax(%h) {axis=-1} <axes=[2]>
  %p: float32[batch, seq, 8] = MatMul(%s, %big) <transpose_b>  # by test_rule
  %r: float32[batch, seq, 1] = ReduceMean(%p, %axes) {keepdims=1} <axes=[2], keepdims>
  %out: float32[batch, seq, 1] = Mul(%r, %half)
}"""


def test_small_graph(make_model):
    m = import_model(make_model(SMALL))
    matmul = next(n for n in m.graph if n.op_type == "MatMul")
    matmul.sem["transpose_b"] = True
    matmul.created_by = "test_rule"
    assert format_graph(m.graph) == EXPECTED
    assert repr(m.graph) == EXPECTED
    assert repr(matmul) == "%p: float32[batch, seq, 8] = MatMul(%s, %big) <transpose_b>  # by test_rule"
    assert format_node(matmul, show_types=False) == (
        "%p = MatMul(%s, %big) <transpose_b>  # by test_rule")


def test_omitted_inputs_unknown_dims_and_domains(make_model):
    m = import_model(make_model("""
        agraph (float[N, ?] x, int64[2] shape) => (float y, float z) {
          y = Clip (x, , shape)
          z = com.example.Thing <alpha = 0.25, mode = "fast", sizes = [1, 2]> (x)
        }""", extra_opsets={"com.example": 1}), infer_shapes=False)
    y, z = list(m.graph)
    assert repr(m.graph.inputs[0]) == "%x: float32[N, ?]"
    assert repr(y) == "%y: float32[] = Clip(%x, _, %shape)"
    assert repr(z) == ("%z: float32[] = com.example::Thing(%x) "
                       "{alpha=0.25, mode='fast', sizes=[1, 2]}")


def test_subgraphs_are_indented(make_model):
    m = import_model(make_model("""
        agraph (float[N] x, bool c) => (float[N] y) {
          y = If (c) < then_branch = g1 () => (float[N] t) { t = Relu (x) },
                       else_branch = g2 () => (float[N] e) { e = Neg (x) } >
        }"""))
    assert format_graph(m.graph) == textwrap.dedent("""\
        graph agraph(%x: float32[N], %c: bool[]) -> (%y: float32[N]) {
          %y: float32[N] = If(%c)
            then_branch:
              graph g1() -> (%t: float32[N]) {
                %t: float32[N] = Relu(%x)
              }
            else_branch:
              graph g2() -> (%e: float32[N]) {
                %e: float32[N] = Neg(%x)
              }
        }""")


def test_external_constants_are_not_read(tmp_path, make_model):
    import numpy as np
    import onnx

    proto = make_model("agraph (float[4] x) => (float[4] y) { y = Add (x, w) }")
    proto.graph.initializer.append(onnx.numpy_helper.from_array(np.ones(4, np.float32), "w"))
    onnx.save_model(proto, tmp_path / "m.onnx", save_as_external_data=True, location="w.bin",
                    size_threshold=0)
    np.zeros(4, np.float32).tofile(tmp_path / "w.bin")  # printing must not show these
    m = import_model(tmp_path / "m.onnx")
    assert format_graph(m.graph).splitlines()[1] == "  %w = const float32[4] (external)"
