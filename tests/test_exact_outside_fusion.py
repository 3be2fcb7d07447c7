"""Bit for bit where nothing is fused (issue 28): a model that rounds, floors, compares or
takes an argmax after arithmetic on constants keeps its answers, in the main graph and in
If/Loop bodies, while a fused region next to it still gets its non-exact normal forms."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxopt
from onnxopt.ir.exactness import ExactnessPolicy
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline

IR = 10

# Each case: the arithmetic on a constant, then what turns its last bit into another answer.
# Inputs are multiples and near-multiples of the constants, where x/c and x·(1/c) differ.
ARITHMETIC = {
    "div": ("Div", 41.0),
    "div_by_6": ("Div", 6.0),
    "mul_then_div": ("Div", 3.0),  # with a Mul before it: Mul(Mul) merging and Div→Mul
}
SENSITIVE = ["Floor", "Round", "CastInt", "ArgMax", "Equal"]


def _inputs() -> np.ndarray:
    k = np.arange(1, 257, dtype=np.float32)
    return np.concatenate([k * 41, k * 6, k * 3, k * 7 + 0.5]).astype(np.float32)


def _tail(kind: str, value: str, out: str) -> list[onnx.NodeProto]:
    """Nodes from ``value`` to ``out`` that turn a last-bit difference into a different answer."""
    if kind == "Floor":
        return [helper.make_node("Floor", [value], [out])]
    if kind == "Round":
        return [helper.make_node("Round", [value], [out])]
    if kind == "CastInt":
        return [helper.make_node("Cast", [value], [out], to=TensorProto.INT32)]
    if kind == "ArgMax":
        # the fractional parts: an exact quotient has none, and a last-bit error flips the max
        return [helper.make_node("Floor", [value], [f"{out}_fl"]),
                helper.make_node("Sub", [value, f"{out}_fl"], [f"{out}_frac"]),
                helper.make_node("Reshape", [f"{out}_frac", "pairs"], [f"{out}_2"]),
                helper.make_node("ArgMax", [f"{out}_2"], [out], axis=1, keepdims=0)]
    if kind == "Equal":
        return [helper.make_node("Floor", [value], [f"{out}_fl"]),
                helper.make_node("Equal", [value, f"{out}_fl"], [out])]
    raise AssertionError(kind)


def _out_type(kind: str) -> int:
    return {"CastInt": TensorProto.INT32, "ArgMax": TensorProto.INT64,
            "Equal": TensorProto.BOOL}.get(kind, TensorProto.FLOAT)


def _body(arith: str, kind: str, x: str, out: str) -> tuple[list, list]:
    op, c = ARITHMETIC[arith]
    consts = [onnx.numpy_helper.from_array(np.array(c, np.float32), f"c_{out}"),
              onnx.numpy_helper.from_array(np.array([-1, 2], np.int64), "pairs"),
              onnx.numpy_helper.from_array(np.array(2.0, np.float32), f"two_{out}")]
    nodes = []
    if arith == "mul_then_div":
        nodes.append(helper.make_node("Mul", [x, f"two_{out}"], [f"{out}_x2"]))
        x = f"{out}_x2"
    nodes.append(helper.make_node(op, [x, f"c_{out}"], [f"{out}_q"]))
    return nodes + _tail(kind, f"{out}_q", out), consts


def _model(arith: str, kind: str, where: str) -> onnx.ModelProto:
    n = len(_inputs())
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])
    y = helper.make_tensor_value_info("y", _out_type(kind), None)
    if where == "main":
        nodes, consts = _body(arith, kind, "x", "y")
        graph = helper.make_graph(nodes, "g", [x], [y], consts)
    elif where == "if":
        inner, consts = _body(arith, kind, "x", "then_y")
        then = helper.make_graph(inner, "then", [], [helper.make_tensor_value_info(
            "then_y", _out_type(kind), None)], consts)
        other, consts2 = _body(arith, kind, "x", "else_y")
        other_graph = helper.make_graph(other, "else", [], [helper.make_tensor_value_info(
            "else_y", _out_type(kind), None)], consts2)
        cond = onnx.numpy_helper.from_array(np.array(True), "cond")
        graph = helper.make_graph(
            [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other_graph)],
            "g", [x], [y], [cond])
    else:  # a Loop of one trip whose body computes it as a scan output
        inner, consts = _body(arith, kind, "x", "loop_y")
        body = helper.make_graph(
            [*inner, helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("c_in", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("loop_y", _out_type(kind), None)], consts)
        trips = onnx.numpy_helper.from_array(np.array(1, np.int64), "trips")
        cond = onnx.numpy_helper.from_array(np.array(True), "cond")
        graph = helper.make_graph(
            [helper.make_node("Loop", ["trips", "cond"], ["y"], body=body)],
            "g", [x], [y], [trips, cond])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR
    return model


def _run(model: onnx.ModelProto) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": _inputs()})[0]


def test_the_cases_are_sensitive_to_the_last_bit():
    """Without the contract these would fail: x/c and x·(1/c) differ on these inputs."""
    x = _inputs()
    for c in (41.0, 6.0, 3.0):
        assert not np.array_equal(x / np.float32(c), x * np.float32(1 / c)), c
    assert not np.array_equal(np.floor(x / np.float32(41)), np.floor(x * np.float32(1 / 41)))


@pytest.mark.parametrize("where", ["main", "if", "loop"])
@pytest.mark.parametrize("kind", SENSITIVE)
@pytest.mark.parametrize("arith", sorted(ARITHMETIC))
def test_rounding_after_arithmetic_on_constants_is_bitwise_equal(arith, kind, where):
    model = _model(arith, kind, where)
    result = onnxopt.optimize(model)
    assert np.array_equal(_run(model), _run(result))


def test_a_non_exact_rewrite_outside_fusion_is_refused_and_reported():
    model = _model("div", "Floor", "main")
    result = run_pipeline(model, OptimizeOptions(target="cpu"))
    summary = result.report.stages["exactness"].to_json()
    assert summary["refused"] == {"canonical_scale": 1}
    assert summary["rounds"] == 2
    assert [n.op_type for n in result.proto.graph.node] == ["Div", "Floor"]


def test_strict_determinism_makes_no_non_exact_rewrite():
    model = _model("div", "Floor", "main")
    result = run_pipeline(model, OptimizeOptions(target="cpu", determinism="strict"))
    summary = result.report.stages["exactness"]
    assert summary.policy == ExactnessPolicy(inexact=False)
    assert summary.rounds == 1


def _bert_with_a_floor(models_dir) -> onnx.ModelProto:
    """BERT (attention that fuses, with its Div by the head size's root) plus an output that
    floors a division of the input ids: the two must not share the fusion's liberties."""
    model = onnx.load(models_dir / "bert.ts.onnx")
    ids = model.graph.input[0].name
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(41.0, np.float32),
                                                                "forty_one"))
    model.graph.node.extend([
        helper.make_node("Cast", [ids], ["ids_f"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["ids_f", "forty_one"], ["ids_q"]),
        helper.make_node("Floor", ["ids_q"], ["ids_floor"]),
    ])
    model.graph.output.append(helper.make_tensor_value_info("ids_floor", TensorProto.FLOAT, None))
    return model


def test_fusion_keeps_its_normal_forms_beside_an_exact_floor(models_dir):
    """The same pass (x / c → x · 1/c) is kept inside the GELUs and refused at the Floor."""
    model = _bert_with_a_floor(models_dir)
    result = run_pipeline(model, OptimizeOptions(target="cpu"))
    fusion = result.report.stages["fuse"]
    assert fusion.count("attention") == 2
    gelu = [r for r in fusion.regions if r.rule == "gelu" and r.status == "fused"]
    # GELU's x / √2 became x · (1/√2) inside the fused region: the region says so
    assert len(gelu) == 2 and all("canonical_scale" in r.inexact for r in gelu)
    assert result.report.stages["exactness"].to_json()["refused"] == {"canonical_scale": 1}
    proto = result.whole_proto()
    floor_div = [n for n in proto.graph.node if n.output and n.output[0] == "ids_q"]
    assert [n.op_type for n in floor_div] == ["Div"]
    ids = np.array([[41, 82, 164, 7, 615, 2]], np.int64)
    feeds = {i.name: ids if "id" in i.name else np.ones_like(ids) for i in model.graph.input}
    a = ort.InferenceSession(model.SerializeToString()).run(["ids_floor"], feeds)[0]
    b = ort.InferenceSession(proto.SerializeToString()).run(["ids_floor"], feeds)[0]
    assert np.array_equal(a, b)
