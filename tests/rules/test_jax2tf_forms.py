"""jax2tf + tf2onnx spellings of flax's ``nn.LayerNorm`` and ``jax.nn.gelu(approximate=True)``
fuse into LayerNormFused / GeluFused once normalization has put them in the forms the rules
read (centered_variance, centered_shift, rstd_canonical, cubic_factored), and compute the same
in ONNX Runtime; near misses are left alone, or refused with the rule's reason.

The graphs are built node by node as tf2onnx writes them (``Square`` as ``Mul(x, x)``,
``Rsqrt`` as ``Reciprocal(Sqrt(·))``, constants first where JAX wrote them first, node
names from the TF graph), at the opsets tf2onnx emits (13-17) and IR version 8.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxopt import normalize
from onnxopt.fuse import fuse
from onnxopt.importer import import_model
from onnxopt.legality.target import Target
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.rules import all_rules
from onnxopt.verification import verify_models

IR_VERSION = 8  # what tf2onnx writes; onnx 1.23's default (14) is more than ORT loads
FP32_ERROR = 1e-5  # well under verify's 1e-4: the rewrites change roundings, not results


def _model(nodes, inits, *, dtype=np.float32, hidden=8, opset=15,
           extra_outputs=()) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    shape = ["batch", "seq", hidden]
    graph = helper.make_graph(
        nodes, "tf2onnx", [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, shape),
         *(helper.make_tensor_value_info(name, elem, dims) for name, dims in extra_outputs)],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tf2onnx")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def _const(name: str, value, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _node(op: str, inputs: list[str], output: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], name=f"LayerNorm/{output}", **attrs)


def flax_layer_norm(*, arrangement="weight_in_rstd", square="Mul", mean_square="Mul",
                    zero_first=True, rsqrt="Reciprocal", zero=0.0, sq_axes=(-1,),
                    mean_axes=(-1,), dtype=np.float32, hidden=8, opset=15,
                    extra=(), extra_outputs=()) -> onnx.ModelProto:
    """flax ``nn.LayerNorm`` through jax2tf + tf2onnx:

        mean = mean(x); var = max(0, mean(x²) − mean²); mul = rsqrt(var + ε)·γ
        y = (x − mean)·mul + β                        (flax, "weight_in_rstd")
        y = ((x − mean)·rsqrt(var + ε))·γ + β         ("weight_after")
        y = x·mul + (β − mean·mul)                    (TF batch-norm arithmetic, "shift_in_bias")
    """
    rng = np.random.default_rng(hidden)
    inits = [_const("gamma", rng.uniform(0.5, 1.5, hidden), dtype),
             _const("beta", rng.standard_normal(hidden), dtype),
             _const("eps", 1e-6, dtype), _const("zero", zero, dtype), _const("one", 1.0, dtype),
             _const("two", 2.0, dtype)]
    nodes = [_node("ReduceMean", ["x"], "mean", axes=list(mean_axes), keepdims=1),
             _node(square, ["x", "x" if square == "Mul" else "two"], "square"),
             _node("ReduceMean", ["square"], "mean_sq", axes=list(sq_axes), keepdims=1),
             _node(mean_square, ["mean", "mean" if mean_square == "Mul" else "two"], "mean2"),
             _node("Sub", ["mean_sq", "mean2"], "diff"),
             _node("Max", ["zero", "diff"] if zero_first else ["diff", "zero"], "var"),
             _node("Add", ["var", "eps"], "var_eps"),
             _node("Sqrt", ["var_eps"], "std"),
             _node(*(("Reciprocal", ["std"]) if rsqrt == "Reciprocal" else ("Div", ["one", "std"])),
                   "rstd")]
    if arrangement == "weight_after":
        nodes += [_node("Sub", ["x", "mean"], "centered"), _node("Mul", ["centered", "rstd"], "n"),
                  _node("Mul", ["n", "gamma"], "scaled"), _node("Add", ["scaled", "beta"], "y")]
    elif arrangement == "weight_in_rstd":
        nodes += [_node("Mul", ["rstd", "gamma"], "mul"), _node("Sub", ["x", "mean"], "centered"),
                  _node("Mul", ["centered", "mul"], "scaled"), _node("Add", ["scaled", "beta"], "y")]
    else:
        nodes += [_node("Mul", ["rstd", "gamma"], "mul"), _node("Mul", ["x", "mul"], "x_mul"),
                  _node("Mul", ["mean", "mul"], "mean_mul"),
                  _node("Sub", ["beta", "mean_mul"], "shift"), _node("Add", ["x_mul", "shift"], "y")]
    return _model(nodes + list(extra), inits, dtype=dtype, hidden=hidden, opset=opset,
                  extra_outputs=extra_outputs)


def jax_gelu(*, cube="x_square", distributed=False, cubic=0.044715, dtype=np.float32, hidden=8,
             opset=15, extra=(), extra_outputs=()) -> onnx.ModelProto:
    """``jax.nn.gelu(x, approximate=True)`` through jax2tf + tf2onnx:
    ``x · (0.5 · (1 + tanh(√(2/π) · (x + 0.044715 · x³))))``, x³ as jax2tf's integer_pow writes
    it (``x·(x·x)``), or ``Pow``; ``distributed``: the √(2/π) multiplied into both terms."""
    k = np.sqrt(2 / np.pi)
    inits = [_const("half", 0.5, dtype), _const("one", 1.0, dtype), _const("k", k, dtype),
             _const("c", cubic, dtype), _const("kc", k * cubic, dtype),
             _const("three", 3.0, dtype)]
    if cube == "x_square":
        nodes = [_node("Mul", ["x", "x"], "x2"), _node("Mul", ["x", "x2"], "x3")]
    elif cube == "square_x":
        nodes = [_node("Mul", ["x", "x"], "x2"), _node("Mul", ["x2", "x"], "x3")]
    else:
        nodes = [_node("Pow", ["x", "three"], "x3")]
    if distributed:
        nodes += [_node("Mul", ["k", "x"], "kx"), _node("Mul", ["kc", "x3"], "kcx3"),
                  _node("Add", ["kx", "kcx3"], "inner")]
    else:
        nodes += [_node("Mul", ["c", "x3"], "cx3"), _node("Add", ["x", "cx3"], "poly"),
                  _node("Mul", ["k", "poly"], "inner")]
    nodes += [_node("Tanh", ["inner"], "t"), _node("Add", ["one", "t"], "one_t"),
              _node("Mul", ["half", "one_t"], "cdf"), _node("Mul", ["x", "cdf"], "y")]
    return _model(nodes + list(extra), inits, dtype=dtype, hidden=hidden, opset=opset,
                  extra_outputs=extra_outputs)


def _fused(proto: onnx.ModelProto):
    """(op counts after normalize + fuse with every rule, the fusion report)."""
    model = import_model(proto)
    normalize.run(model, OptimizeOptions())
    report = fuse(model, all_rules(), Target(), debug=True)
    return Counter(n.op_type for n in model.graph), report, model


def _optimize_and_compare(proto: onnx.ModelProto):
    """The whole pipeline, then both models in ONNX Runtime on two random size sets."""
    result = run_pipeline(proto, OptimizeOptions(target="cpu", debug=True))
    report = verify_models(proto, result.proto, runs=2)
    assert report.ok, report.to_json()
    assert len({tuple(sorted(r.items())) for r in report.runs}) == 2  # two different shapes
    return result, report


def _max_error(report) -> float:
    return max(o.max_rel for o in report.outputs)


# --- LayerNorm ----------------------------------------------------------------------------------

@pytest.mark.parametrize("arrangement", ["weight_in_rstd", "weight_after", "shift_in_bias"])
@pytest.mark.parametrize("hidden", [8, 32])
def test_flax_layer_norm_fuses(arrangement, hidden):
    ops, report, model = _fused(flax_layer_norm(arrangement=arrangement, hidden=hidden))
    assert ops == {"LayerNormFused": 1}, ops
    assert report.count("layer_norm") == 1
    (node,) = model.graph
    assert [v.name for v in node.inputs] == ["x", "gamma", "beta"]
    assert node.attr("epsilon") == pytest.approx(1e-6) and node.attr("axis") == -1
    result, verified = _optimize_and_compare(flax_layer_norm(arrangement=arrangement,
                                                             hidden=hidden))
    assert result.report.stages["fuse"].count("layer_norm") == 1
    assert _max_error(verified) < FP32_ERROR


@pytest.mark.parametrize("kwargs", [
    {"square": "Pow", "mean_square": "Pow", "zero_first": False},
    {"mean_square": "Pow", "rsqrt": "Div"},
    {"square": "Pow", "rsqrt": "Div", "arrangement": "shift_in_bias"},
], ids=["pow_squares", "one_over_sqrt", "pow_div_shift"])
@pytest.mark.parametrize("opset", [13, 17])
def test_flax_layer_norm_spellings(kwargs, opset):
    proto = flax_layer_norm(opset=opset, **kwargs)
    ops, _report, _ir = _fused(proto)
    assert ops == {"LayerNormFused": 1}, ops
    result, verified = _optimize_and_compare(proto)
    if opset == 17:  # ONNX Runtime's own op is legal from opset 17
        assert Counter(n.op_type for n in result.proto.graph.node) == {"LayerNormalization": 1}
    assert _max_error(verified) < FP32_ERROR


@pytest.mark.parametrize("opset", [15, 17])
def test_flax_layer_norm_float16(opset):
    proto = flax_layer_norm(dtype=np.float16, opset=opset)
    ops, _report, model = _fused(proto)
    assert ops == {"LayerNormFused": 1}, ops
    assert next(iter(model.graph)).outputs[0].dtype == "float16"
    _optimize_and_compare(proto)


def test_flax_layer_norm_more_accurate_where_the_mean_is_large():
    """With a mean 100x the spread, E[x²] − E[x]² cancels most of float32's digits; the
    centred form does not: against a float64 reference the fused model is the closer."""
    proto = flax_layer_norm()
    result = run_pipeline(proto, OptimizeOptions(target="cpu"))
    rng = np.random.default_rng(0)
    x = (300.0 + rng.standard_normal((2, 5, 8))).astype(np.float32)
    gamma, beta = (numpy_helper.to_array(t) for t in proto.graph.initializer[:2])
    x64 = x.astype(np.float64)
    d = x64 - x64.mean(-1, keepdims=True)
    want = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-6) * gamma + beta
    errors = []
    for model in (proto, result.proto):
        (got,) = _run(model, x)
        errors.append(np.abs(got - want).max())
    assert errors[1] < errors[0]


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})


def test_flax_layer_norm_float16_input_computed_in_float32():
    """flax computes a float16 input's statistics and normalisation in float32 (float32
    weights) and casts the result back: it fuses with ``compute_dtype`` float32."""
    proto = flax_layer_norm()
    graph = proto.graph
    graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    for node in graph.node:
        node.input[:] = ["x32" if v == "x" else v for v in node.input]
        node.output[:] = ["y32" if v == "y" else v for v in node.output]
    graph.node.insert(0, helper.make_node("Cast", ["x"], ["x32"], name="LayerNorm/Cast",
                                          to=TensorProto.FLOAT))
    graph.node.append(helper.make_node("Cast", ["y32"], ["y"], name="LayerNorm/Cast_1",
                                       to=TensorProto.FLOAT16))
    onnx.checker.check_model(proto)
    ops, _report, model = _fused(proto)
    assert ops["LayerNormFused"] == 1, ops
    node = next(n for n in model.graph if n.op_type == "LayerNormFused")
    assert node.inputs[0].name == "x" and node.attr("compute_dtype") == "float32"
    # At opset 17 the node becomes Cast + LayerNormalization in float32 (the spelled-out form
    # is one ONNX Runtime's own LayerNormFusion mis-types at load); before 17, the primitives.
    for opset in (15, 17):
        proto.opset_import[0].version = opset
        result = run_pipeline(proto, OptimizeOptions(target="cpu"))
        assert result.report.stages["fuse"].count("layer_norm") == 1
        assert ("LayerNormalization" in result.report.nodes_after) == (opset >= 17)
        assert verify_models(proto, result.proto, runs=2).ok


# --- LayerNorm: left alone, or refused with a reason ----------------------------------------------

def test_clamp_at_a_nonzero_value_is_left_alone():
    ops, report, _ir = _fused(flax_layer_norm(zero=1e-3))
    assert ops["Max"] == 1 and "LayerNormFused" not in ops
    assert report.count("layer_norm") == 0


def test_reductions_over_different_axes_are_left_alone():
    ops, report, _ir = _fused(flax_layer_norm(sq_axes=(1,)))
    assert ops["Max"] == 1 and "LayerNormFused" not in ops
    assert report.count("layer_norm") == 0


@pytest.mark.parametrize("read", ["mean_sq", "mean2", "square"])
def test_one_pass_statistic_read_elsewhere_is_left_alone(read):
    dims = ["batch", "seq", 8 if read == "square" else 1]
    proto = flax_layer_norm(extra=[_node("Abs", [read], "other")],
                            extra_outputs=[("other", dims)])
    ops, report, _ir = _fused(proto)
    assert ops["Max"] == 1 and "LayerNormFused" not in ops
    assert report.count("layer_norm") == 0
    _optimize_and_compare(proto)


def test_normalised_over_another_axis_is_refused():
    """Both statistics over axis 1: the variance is centred, and the rule says why it stops."""
    proto = flax_layer_norm(mean_axes=(1,), sq_axes=(1,), arrangement="weight_after")
    ops, report, _ir = _fused(proto)
    assert ops["Max"] == 0 and "LayerNormFused" not in ops
    reasons = [r.detail for r in report.regions
               if r.rule == "layer_norm" and r.status == "refused"]
    assert reasons == ["LayerNorm/mean: the mean runs over axis [1], not the last axis (2)"]
    assert [r.code for r in report.regions if r.rule == "layer_norm"
            and r.status == "refused"] == ["not_last_axis"]
    _optimize_and_compare(proto)


def test_centred_value_read_elsewhere_is_refused():
    proto = flax_layer_norm(arrangement="weight_after",
                            extra=[_node("Abs", ["centered"], "other")],
                            extra_outputs=[("other", ["batch", "seq", 8])])
    ops, report, _ir = _fused(proto)
    assert "LayerNormFused" not in ops
    reasons = [r.detail for r in report.regions
               if r.rule == "layer_norm" and r.status == "refused"]
    # the centred value the variance now reads, merged with the model's own x − mean
    assert reasons == ["%x_centered is also used by LayerNorm/other (Abs) outside the match"]
    assert [r.code for r in report.regions if r.rule == "layer_norm"
            and r.status == "refused"] == ["used_outside_match"]
    _optimize_and_compare(proto)


# --- GELU ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("cube", ["x_square", "square_x", "pow"])
@pytest.mark.parametrize("distributed", [False, True], ids=["grouped", "distributed"])
@pytest.mark.parametrize("hidden", [8, 32])
def test_jax_tanh_gelu_fuses(cube, distributed, hidden):
    proto = jax_gelu(cube=cube, distributed=distributed, hidden=hidden)
    ops, _report, model = _fused(proto)
    assert ops == {"GeluFused": 1}, ops
    (node,) = model.graph
    assert node.attr("approximate") == "tanh" and [v.name for v in node.inputs] == ["x"]
    result, verified = _optimize_and_compare(proto)
    assert result.report.stages["fuse"].count("gelu") == 1
    assert _max_error(verified) < FP32_ERROR


@pytest.mark.parametrize("distributed", [False, True], ids=["grouped", "distributed"])
@pytest.mark.parametrize("opset", [13, 17])
def test_jax_tanh_gelu_float16(distributed, opset):
    proto = jax_gelu(distributed=distributed, dtype=np.float16, opset=opset)
    ops, _report, _ir = _fused(proto)
    assert ops == {"GeluFused": 1}, ops
    _optimize_and_compare(proto)


def test_distributed_cubic_of_another_curve_is_refused_by_its_constant():
    """c1·x + c2·x³ is factored whatever the constants; the GELU rule then names the one that is
    not GELU's."""
    proto = jax_gelu(distributed=True, cubic=0.06)
    ops, report, _ir = _fused(proto)
    assert "GeluFused" not in ops
    partial = [r.detail for r in report.regions if r.rule == "gelu" and r.status == "partial"]
    assert any("expected 0.044715" in reason for reason in partial), partial
    assert "constant_value" in [r.code for r in report.regions
                                if r.rule == "gelu" and r.status == "partial"]
    _optimize_and_compare(proto)


@pytest.mark.parametrize("read", ["kx", "kcx3"])
def test_distributed_term_read_elsewhere_is_left_alone(read):
    proto = jax_gelu(distributed=True, extra=[_node("Abs", [read], "other")],
                     extra_outputs=[("other", ["batch", "seq", 8])])
    ops, _report, _ir = _fused(proto)
    assert "GeluFused" not in ops and ops["Tanh"] == 1
    _optimize_and_compare(proto)


# --- RMSNorm: the same weight placement ---------------------------------------------------------

def test_flax_rms_norm_fuses():
    """flax ``nn.RMSNorm`` folds its weight into the rsqrt the same way: ``x · (rsqrt(mean(x²)
    + ε) · γ)``; rstd_canonical moves the weight after, and the RMSNorm pattern reads it."""
    rng = np.random.default_rng(0)
    inits = [_const("gamma", rng.uniform(0.5, 1.5, 8)), _const("eps", 1e-6)]
    nodes = [_node("Mul", ["x", "x"], "square"),
             _node("ReduceMean", ["square"], "mean_sq", axes=[-1], keepdims=1),
             _node("Add", ["mean_sq", "eps"], "var_eps"), _node("Sqrt", ["var_eps"], "std"),
             _node("Reciprocal", ["std"], "rstd"), _node("Mul", ["rstd", "gamma"], "mul"),
             _node("Mul", ["x", "mul"], "y")]
    proto = _model(nodes, inits)
    ops, _report, _ir = _fused(proto)
    assert ops == {"RMSNormFused": 1}, ops
    _result, verified = _optimize_and_compare(proto)
    assert _max_error(verified) < FP32_ERROR
