"""A declared shape is not believed for a value whose rank varies from run to run.

Why: ``Unsqueeze([0], axes=Range(0, seq))`` has rank ``seq + 1``; a file that declares it
``[1, seq]`` is right for ``seq == 1`` only. onnx's inference leaves such a value without
a rank, and the importer used to fill it from the declaration, so everything computed from
it was matched at a rank it does not have (fuzz run 43: an attention fused there failed in
ONNX Runtime at batch 3, seq 3). The same chain with constant axes keeps its declared
shapes: there the rank is fixed and the declaration is a useful hint.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxopt
from onnxopt.importer.build import import_model
from onnxopt.importer.varying_ranks import ranks_that_vary

_DECLARED = {"u": [1, "seq"], "e": [1, "seq", 8], "y": ["batch", "seq", 8]}


def _model(axes_from_range: bool) -> onnx.ModelProto:
    """``y = x + table[u]`` where ``u`` unsqueezes a zero along ``axes``: a Range over the
    sequence length (rank ``seq + 1``), or the constant ``[0]`` over that Range (rank 2)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seq_len"], axis=0),
        helper.make_node("Range", ["zero", "seq_len", "one"], ["arange"]),
        helper.make_node("Unsqueeze", ["zero_1d", "arange"] if axes_from_range
                         else ["arange", "zero_1d"], ["u"]),
        helper.make_node("Gather", ["table", "u"], ["e"], axis=0),
        helper.make_node("Add", ["x", "e"], ["y"]),
    ]
    inits = [
        helper.make_tensor("zero", TensorProto.INT64, [], [0]),
        helper.make_tensor("one", TensorProto.INT64, [], [1]),
        helper.make_tensor("zero_1d", TensorProto.INT64, [1], [0]),
        onnx.numpy_helper.from_array(
            np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32), "table"),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
        value_info=[helper.make_tensor_value_info(
            name, TensorProto.INT64 if name == "u" else TensorProto.FLOAT, dims)
            for name, dims in _DECLARED.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8  # an output of no declared shape: onnx's checker wants one, ORT does not
    return m


def _shapes(model: onnx.ModelProto) -> dict:
    imported = import_model(model)
    return {v.name: v.shape for node in imported.graph for v in node.outputs
            if v.name in _DECLARED}


def test_a_rank_that_varies_is_not_taken_from_the_file():
    assert _shapes(_model(axes_from_range=True)) == {"u": None, "e": None, "y": None}


def test_a_fixed_rank_keeps_the_declared_shapes():
    shapes = _shapes(_model(axes_from_range=False))
    assert len(shapes["u"]) == 2 and len(shapes["e"]) == 3 and len(shapes["y"]) == 3


def test_only_the_values_downstream_are_doubted():
    graph = _model(axes_from_range=True).graph
    inferred = {"arange": ("int64", (None,)), "shape": ("int64", (3,)),
                "seq_len": ("int64", ())}
    assert ranks_that_vary(graph, inferred) == {"u", "e", "y"}
    inferred["arange"] = ("int64", (4,))  # a length known before the run: the rank is fixed
    assert ranks_that_vary(graph, inferred) == set()


def test_the_output_computes_what_the_model_does_at_every_length():
    model = _model(axes_from_range=True)
    out = onnxopt.optimize(model, target="cpu")

    def run(m, x):
        return ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    for batch, seq in ((1, 1), (2, 3), (3, 2)):
        x = np.random.default_rng(seq).standard_normal((batch, seq, 8)).astype(np.float32)
        want, got = run(model, x), run(out, x)
        assert want.shape == got.shape and want.ndim == max(seq + 2, 3)
        np.testing.assert_array_equal(want, got)


def test_a_length_read_from_a_fixed_rank_is_fixed_though_inference_cannot_say_it():
    """``Reshape(y, Shape(x))``: the target's length is ``x``'s rank, fixed, even where
    onnx's inference knows neither (a model whose every constant lies in external data)."""
    g = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["target"]),
         helper.make_node("Slice", ["target", "zero_1d", "two_1d"], ["head"]),
         helper.make_node("Concat", ["head", "minus_one"], ["target2"], axis=0),
         helper.make_node("Reshape", ["y", "target"], ["r"]),
         helper.make_node("Reshape", ["y", "target2"], ["r2"]),
         helper.make_node("Range", ["zero", "n", "one"], ["steps"]),
         helper.make_node("Reshape", ["y", "steps"], ["r3"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("r", "r2", "r3")],
        [helper.make_tensor("zero_1d", TensorProto.INT64, [1], [0]),
         helper.make_tensor("two_1d", TensorProto.INT64, [1], [2]),
         helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1]),
         helper.make_tensor("zero", TensorProto.INT64, [], [0]),
         helper.make_tensor("one", TensorProto.INT64, [], [1])])
    assert ranks_that_vary(g, {}) == {"r3"}


def test_no_shipped_export_is_doubted_even_without_inference(models_dir):
    """Where onnx's inference fails (it is a hint, and crashes on some models), exporters'
    reshape and expand targets (``Shape``, ``Gather``, ``Concat``, ``Where`` of ``-1``
    fix-ups, ``ConstantOfShape(Shape(v))``) still have fixed lengths: no declared shape of a
    real export is dropped, so its fusions stay."""
    for path in sorted(models_dir.glob("*.onnx")):
        graph = onnx.load(str(path), load_external_data=False).graph
        assert ranks_that_vary(graph, {}) == set(), path.name


def test_a_file_listing_its_nodes_out_of_order_is_doubted_the_same():
    """ONNX Runtime runs a graph whose nodes are not listed in order (so does onnxopt): the
    doubt must reach every value computed from the varying one all the same."""
    graph = _model(axes_from_range=True).graph
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(reversed(nodes))
    inferred = {"arange": ("int64", (None,)), "shape": ("int64", (3,)),
                "seq_len": ("int64", ())}
    assert ranks_that_vary(graph, inferred) == {"u", "e", "y"}


def _count_then_expand(axes: list[str]) -> onnx.GraphProto:
    """``Expand(x, ReduceSum(Cast(Reshape(mask, [-1]))))``, keepdims: dynamo's count of a
    boolean index, a 1-element target whatever the mask (``axes``: the reduction's inputs)."""
    nodes = [
        helper.make_node("Reshape", ["mask", "minus_one"], ["flat"]),
        helper.make_node("Cast", ["flat"], ["ints"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["ints", *axes], ["count"], keepdims=1),
        helper.make_node("Expand", ["x", "count"], ["y"]),
    ]
    return helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("mask", TensorProto.BOOL, ["batch", "seq"]),
                     helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                     helper.make_tensor_value_info("r", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1]),
         helper.make_tensor("axis0", TensorProto.INT64, [1], [0])])


def test_a_reduction_that_keeps_its_axes_has_a_fixed_length():
    assert ranks_that_vary(_count_then_expand([]), {}) == set()
    assert ranks_that_vary(_count_then_expand(["axis0"]), {}) == set()


def test_a_reduction_over_computed_axes_may_vary():
    assert ranks_that_vary(_count_then_expand(["r"]), {}) == {"y"}


def test_axes_whose_bytes_do_not_fit_their_header_are_unknown():
    """A corrupted file (the axes' raw bytes shorter than one int64) is no internal error:
    the axes read as computed at run time, so the length may vary (fuzz m20240611-419)."""
    graph = _count_then_expand(["axis0"])
    axes = next(t for t in graph.initializer if t.name == "axis0")
    axes.raw_data = b"\x00\x00\x00"
    del axes.int64_data[:]
    assert ranks_that_vary(graph, {}) == {"y"}
