"""Folding never changes a value's shape and never makes a model heavier.

Two shapes of real exports that broke it: PyTorch's reflect-padding ``pads`` idiom
(``Concat → Reshape([-1, 2]) → Slice(step -1) → Transpose → Reshape([-1])``), whose
contents were once folded flat (``[4]`` where the model says ``[2, 2]``), inside and
outside an ``If``; and weight-only int8 models, whose ``DequantizeLinear`` of int8
weights must stay (folding it writes the weights back as float32, four times larger).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxopt


def pads_idiom(p: str) -> str:
    """``{p}pads``: [0, 2, 0, 3] (pad the last axis by 2 before and 3 after), as torch writes it."""
    return f"""
    {p}z = Constant<value = int64[2] {{0, 0}}>()
    {p}p = Constant<value = int64[2] {{2, 3}}>()
    {p}c = Concat<axis = 0>({p}p, {p}z)
    {p}shape2 = Constant<value = int64[2] {{-1, 2}}>()
    {p}r = Reshape({p}c, {p}shape2)
    {p}s0 = Constant<value = int64[1] {{-1}}>()
    {p}s1 = Constant<value = int64[1] {{-9223372036854775807}}>()
    {p}s2 = Constant<value = int64[1] {{0}}>()
    {p}s3 = Constant<value = int64[1] {{-1}}>()
    {p}sl = Slice({p}r, {p}s0, {p}s1, {p}s2, {p}s3)
    {p}t = Transpose<perm = [1, 0]>({p}sl)
    {p}flat = Constant<value = int64[1] {{-1}}>()
    {p}pads = Reshape({p}t, {p}flat)
"""


def _ort(model: onnx.ModelProto, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_reflect_pads_idiom_folds_to_the_right_shape_inside_and_outside_if():
    text = f"""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1, 16] x, bool cond) => (float[1, 21] y, float[1, ?] w) {{
        {pads_idiom("a_")}
        y = Pad<mode = "reflect">(x, a_pads)
        w = If(cond) <
            then_branch = t1 () => (float[1, ?] o1) {{
                {pads_idiom("b_")}
                o1 = Pad<mode = "reflect">(x, b_pads)
            }},
            else_branch = t2 () => (float[1, ?] o2) {{ o2 = Identity(x) }}
        >
    }}"""
    model = onnx.parser.parse_model(text)
    model.ir_version = 8
    out = onnxopt.optimize(model, target="cpu")
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    for c in (True, False):
        feeds = {"x": x, "cond": np.array(c)}
        for a, b in zip(_ort(model, feeds), _ort(out, feeds)):
            np.testing.assert_array_equal(a, b)


def _int8_weight_only(layers: int = 3, width: int = 64) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = rng.integers(-127, 128, size=(width, width), dtype=np.int8)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(rng.random(width).astype(np.float32) / 64, f"s{i}")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", f"s{i}"], [f"wf{i}"], axis=1),
                  helper.make_node("MatMul", [x, f"wf{i}"], [f"h{i}"]),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"])]
        x = f"r{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", width])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def test_int8_weights_stay_int8(tmp_path):
    model = _int8_weight_only()
    src = tmp_path / "int8.onnx"
    onnx.save_model(model, src)
    out = onnxopt.optimize(str(src), output=str(tmp_path / "int8.opt.onnx"), target="cpu")
    assert sum(n.op_type == "DequantizeLinear" for n in out.graph.node) == 3
    assert {t.data_type for t in out.graph.initializer if t.name.startswith("w")} == {
        TensorProto.INT8}
    assert (tmp_path / "int8.opt.onnx").stat().st_size <= src.stat().st_size
    x = np.random.default_rng(1).random((2, 64)).astype(np.float32)
    np.testing.assert_allclose(_ort(model, {"x": x})[0], _ort(out, {"x": x})[0], rtol=1e-6)
