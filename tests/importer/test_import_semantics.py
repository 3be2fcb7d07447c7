"""What the importer records: meaning behind ONNX spelling, scopes of subgraphs, lazy weights."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxopt
from onnxopt.exporter import export_model
from onnxopt.importer import import_model
from onnxopt.ir.verifier import verify_graph


def _node(model, op_type):
    return next(n for n in model.graph if n.op_type == op_type)


REDUCE_17 = """
agraph (float[B, S, 8] x) => (float[B, S, 1] y) {
  y = ReduceMean <axes = [-1]> (x)
}
"""
REDUCE_18 = """
agraph (float[B, S, 8] x) => (float[B, S, 1] y) {
  axes = Constant <value = int64[1] {-1}> ()
  y = ReduceMean (x, axes)
}
"""
REDUCE_18_INIT = """
agraph (float[B, S, 8] x) => (float[B, S, 1] y)
  <int64[1] axes = {2}> {
  y = ReduceMean (x, axes)
}
"""


@pytest.mark.parametrize("text, opset", [(REDUCE_17, 17), (REDUCE_18, 18), (REDUCE_18_INIT, 18)],
                         ids=["attr-opset17", "constant-opset18", "initializer-opset18"])
def test_reduce_mean_axes_are_explicit_whatever_the_spelling(text, opset, make_model):
    m = import_model(make_model(text, opset=opset))
    node = _node(m, "ReduceMean")
    assert node.sem["axes"] == (2,)
    assert node.sem["keepdims"] is True


@pytest.mark.parametrize("spelling, expected", [
    ("ReduceSum <keepdims = 0> (x)", None),
    ("ReduceSum <keepdims = 0, noop_with_empty_axes = 1> (x)", ()),
    ("ReduceSum <keepdims = 0> (x, ax)", "dynamic"),
])
def test_reduce_axes_all_none_or_dynamic(spelling, expected, make_model):
    m = import_model(make_model(f"""
        agraph (float[2, 3] x, int64[1] ax) => (float y) {{ y = {spelling} }}"""))
    node = _node(m, "ReduceSum")
    assert node.sem["axes"] == expected
    assert node.sem["keepdims"] is False


def test_reduce_axes_are_sorted_and_non_negative(make_model):
    m = import_model(make_model("""
        agraph (float[2, 3, 4] x) => (float[2] y) { y = ReduceMax <axes = [-1, 1], keepdims = 0> (x) }
    """, opset=17))
    assert _node(m, "ReduceMax").sem["axes"] == (1, 2)


@pytest.mark.parametrize("attrs, flags", [
    ("", (False, False)), ("<transA = 1>", (True, False)), ("<transB = 1>", (False, True)),
    ("<transA = 1, transB = 1>", (True, True)),
])
def test_gemm_transpose_flags(attrs, flags, make_model):
    m = import_model(make_model(f"""
        agraph (float[4, 4] a, float[4, 4] b) => (float[4, 4] y) {{ y = Gemm {attrs} (a, b) }}"""))
    node = _node(m, "Gemm")
    assert (node.sem["transpose_a"], node.sem["transpose_b"]) == flags


def test_softmax_axis_and_conv_layout(make_model):
    m = import_model(make_model("""
        agraph (float[1, 2, 5, 5] x, float[2, 2, 3, 3] w) => (float[1, 2, 3, 3] y) {
          c = Conv (x, w)
          y = Softmax <axis = -1> (c)
        }"""))
    assert _node(m, "Conv").sem["layout"] == "NCHW"
    assert _node(m, "Softmax").sem["axes"] == (3,)


MATMUL_T = """
agraph (float[B, 3, 4] x, float[B, 5, 4] w) => (float[B, 3, 5] y) {
  wt = Transpose <perm = [0, 2, 1]> (w)
  y = MatMul (x, wt)
}
"""


def test_matmul_transpose_flag_is_exported_as_a_transpose(make_model, write_model, tmp_path):
    src = write_model(MATMUL_T, "mm.onnx")
    m = import_model(src)
    matmul, transpose = _node(m, "MatMul"), _node(m, "Transpose")
    assert matmul.sem == {"transpose_a": False, "transpose_b": False, "reduction_axis": -1}
    # What normalization will do: fold the Transpose into the MatMul's flag.
    m.graph.set_input(matmul, 1, transpose.inputs[0])
    m.graph.remove(transpose)
    matmul.sem["transpose_b"] = True
    verify_graph(m.graph)
    assert "<transpose_b>" in repr(matmul)
    proto = export_model(m)
    onnx.checker.check_model(proto, full_check=True)
    assert [n.op_type for n in proto.graph.node] == ["Transpose", "MatMul"]
    perm = onnx.helper.get_attribute_value(proto.graph.node[0].attribute[0])
    assert list(perm) == [0, 2, 1]
    assert proto.graph.node[0].input[0] == "w"
    assert proto.graph.node[1].input[1] == proto.graph.node[0].output[0]
    out = tmp_path / "mm.out.onnx"
    onnx.save_model(proto, out)
    assert onnxopt.verify(src, out).bitwise


IF_MODEL = """
agraph (float[N] x, bool c) => (float[N] y) {
  two = Constant <value = float[1] {2.0}> ()
  s = Mul (x, two)
  y = If (c) <
    then_branch = g1 () => (float[N] z1) { z1 = Add (s, x) },
    else_branch = g2 () => (float[N] z2) {
      k = Constant <value = float[1] {3.0}> ()
      t = Mul (s, k)
      z2 = Sub (t, x)
    }
  >
}
"""


def test_if_branches_read_outer_values(make_model):
    m = import_model(make_model(IF_MODEL))
    verify_graph(m.graph)
    mul = _node(m, "Mul")
    if_node = _node(m, "If")
    then_g, else_g = if_node.attr("then_branch"), if_node.attr("else_branch")
    assert then_g.parent is if_node and else_g.parent is if_node
    add = next(iter(then_g))
    assert add.inputs[0] is mul.output  # the outer Value itself, not a copy
    readers = {(n.op_type, n.graph.name) for n, _ in mul.output.uses()}
    assert readers == {("Add", "g1"), ("Mul", "g2")}
    assert then_g.root() is m.graph
    # names are shared with the subgraphs: a fresh name never collides with one inside a branch
    assert m.graph.names.fresh("t") == "t_1"


def test_if_model_round_trips_and_verifies(write_model, cli, tmp_path):
    src = write_model(IF_MODEL, "if.onnx")
    out = tmp_path / "if.opt.onnx"
    assert cli("optimize", src, "-o", out, "--no-fuse", "-q")[0] == 0
    onnx.checker.check_model(str(out), full_check=True)
    report = onnxopt.verify(src, out, runs=4)
    assert report.bitwise
    then_branch = onnx.load(str(out)).graph.node[-1].attribute[0].g
    assert [n.op_type for n in then_branch.node] == ["Add"]


def test_subgraph_reading_a_name_nothing_defines_is_dangling(make_model, tmp_path, cli):
    proto = make_model(IF_MODEL.replace("Add (s, x)", "Add (s, nowhere)"))
    onnx.save_model(proto, tmp_path / "bad.onnx")
    rc, _, err = cli("optimize", tmp_path / "bad.onnx")
    assert rc == 1
    assert err.endswith("reads 'nowhere', which nothing produces (dangling input)\n")


def test_constant_nodes_become_constants_and_initializer_defaults_are_kept(make_model):
    proto = make_model("""
        agraph (float[2] x, float[2] bias) => (float[2] y) <float[2] bias = {1.0, 2.0}> {
          k = Constant <value_float = 0.5> ()
          t = Mul (x, k)
          y = Add (t, bias)
        }""")
    m = import_model(proto)
    assert [n.op_type for n in m.graph] == ["Mul", "Add"]
    assert set(m.graph.constants) == {"k"}
    assert float(m.graph.constants["k"].const.numpy()) == 0.5
    assert list(m.graph.input_defaults) == ["bias"]
    back = export_model(m)
    assert [i.name for i in back.graph.input] == ["x", "bias"]
    assert {t.name for t in back.graph.initializer} == {"k", "bias"}
    x = np.array([1.0, 2.0], dtype=np.float32)
    import onnxruntime as ort

    sess = ort.InferenceSession(back.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [1.5, 3.0])


def test_out_of_order_nodes_are_sorted(make_model):
    proto = make_model("agraph (float[2] x) => (float[2] y) { t = Relu (x) \n y = Neg (t) }")
    proto.graph.node.reverse()
    m = import_model(proto)
    assert [n.op_type for n in m.graph] == ["Relu", "Neg"]
    verify_graph(m.graph)
