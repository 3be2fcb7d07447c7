"""Every opset, one meaning: old spellings are read as the new ones and written back as they were.

Each case is a small model in an old opset whose operands are attributes (axes, pads,
clip bounds, slice bounds, k, ratio); the IR holds them as constant inputs, the output
keeps the model's opset and spelling, and ONNX Runtime computes the same numbers.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxopt
from onnxopt.importer import import_model
from onnxopt.ir.node import LEGACY_DOMAIN


def _model(nodes, opset, in_shape=(3, 4), out_shape=None, extra_outputs=()):
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)]
        + [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in extra_outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7 if opset >= 13 else 4
    return m


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def _same_after_optimize(model: onnx.ModelProto, **options) -> onnx.ModelProto:
    x = np.random.default_rng(0).random(tuple(
        d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)).astype(np.float32)
    want = _run(model, x)
    out = onnxopt.optimize(model, target="cpu", **options)
    assert [(i.domain, i.version) for i in out.opset_import if i.domain == ""] == \
        [(i.domain, i.version) for i in model.opset_import if i.domain == ""]
    onnx.checker.check_model(out)
    for a, b in zip(want, _run(out, x)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    return out


CASES = {
    "unsqueeze_squeeze_11": (11, [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 3]),
                                  helper.make_node("Relu", ["u"], ["r"]),
                                  helper.make_node("Squeeze", ["r"], ["y"], axes=[0, 3])]),
    "reduce_mean_17": (17, [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
                            helper.make_node("Sub", ["x", "m"], ["y"])]),
    "reduce_sum_12": (12, [helper.make_node("ReduceSum", ["x"], ["m"], axes=[1], keepdims=1),
                           helper.make_node("Div", ["x", "m"], ["y"])]),
    "slice_9": (9, [helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[3], axes=[1])]),
    "pad_10": (10, [helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 0, 2], value=0.5)]),
    "clip_10": (10, [helper.make_node("Clip", ["x"], ["y"], min=0.2, max=0.7)]),
    "split_12": (12, [helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 3]),
                      helper.make_node("Concat", ["b", "a"], ["y"], axis=1)]),
    "topk_9": (9, [helper.make_node("TopK", ["x"], ["y", "i"], k=2)]),
    "dropout_11": (11, [helper.make_node("Dropout", ["x"], ["d"], ratio=0.3),
                        helper.make_node("Relu", ["d"], ["y"])]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_old_spelling_round_trips_and_computes_the_same(case):
    opset, nodes = CASES[case]
    model = _model(nodes, opset)
    ir = import_model(model)
    op = nodes[0].op_type
    node = next(n for n in ir.graph if n.op_type == op)
    assert not any(a in node.attrs for a in ("axes", "pads", "min", "max", "starts", "k",
                                             "ratio", "split")), node.attrs
    assert any(v is not None and v.const is not None for v in node.inputs[1:])
    _same_after_optimize(model)
    out = _same_after_optimize(model, fuse=False)  # the round trip: spelling as it was
    written = next(n for n in out.graph.node if n.op_type == op)
    assert list(written.input) == list(nodes[0].input)
    assert {a.name for a in written.attribute} == {a.name for a in nodes[0].attribute}
    assert not [t.name for t in out.graph.initializer], "operands went back to attributes"


def test_softmax_before_13_over_a_middle_axis_is_kept_opaque():
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], 11, in_shape=(2, 3, 4))
    ir = import_model(model)
    (node,) = list(ir.graph)
    assert node.domain == LEGACY_DOMAIN  # flattening semantics: no pass may read it as axis 1
    out = _same_after_optimize(model)
    assert out.graph.node[0].domain == "" and out.graph.node[0].attribute[0].i == 1


def test_softmax_before_13_over_the_last_axis_means_the_modern_op():
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=2)], 11, in_shape=(2, 3, 4))
    (node,) = list(import_model(model).graph)
    assert node.domain == "" and node.attr("axis") == -1
    _same_after_optimize(model)


def test_opset_older_than_7_passes_through_untouched():
    model = _model([helper.make_node("Relu", ["x"], ["r"]),
                    helper.make_node("Identity", ["r"], ["y"])], 6)
    model.ir_version = 3
    out = onnxopt.optimize(model, target="cpu")
    assert [n.op_type for n in out.graph.node] == ["Relu", "Identity"]
    assert out.opset_import[0].version == 6


def test_a_model_of_the_ml_domain_only_goes_through(tmp_path, cli):
    g = helper.make_graph(
        [helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml", norm="L2")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 8
    onnx.save_model(m, tmp_path / "ml.onnx")
    rc, _, err = cli("optimize", tmp_path / "ml.onnx", "-o", tmp_path / "out.onnx", "-q",
                     "--target", "cpu")
    assert (rc, err) == (0, "")
    out = onnx.load(tmp_path / "out.onnx")
    assert [(n.domain, n.op_type) for n in out.graph.node] == [("ai.onnx.ml", "Normalizer")]
    assert [(i.domain, i.version) for i in out.opset_import] == [("ai.onnx.ml", 1)]


def test_a_computed_operand_that_the_old_opset_cannot_spell_is_an_error():
    from onnxopt.exporter import export_model
    from onnxopt.ir.opset_spelling import SpellingError

    model = _model([helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0])], 11)
    ir = import_model(model)
    node = next(iter(ir.graph))
    computed = ir.graph.make_node("Shape", [ir.graph.inputs[0]], before=node).output
    ir.graph.set_input(node, 1, computed)
    with pytest.raises(SpellingError, match="needs a constant 'axes'"):
        export_model(ir)
