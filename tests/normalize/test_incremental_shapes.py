"""Shape inference re-infers only the nodes an edit reached, and gives what a full pass gives.

:func:`onnxopt.normalize.shapes.infer_shapes` keeps, on each node, what its rule last read and
wrote (``Node.inferred_from``) and skips the node while that is unchanged. These tests check
both halves: that whatever an edit reaches is inferred again (a skipped node whose inputs
changed would keep a stale shape, and a fold would then be wrong), and that on real exports
the whole pipeline ends in exactly the IR it ends in when every node is inferred every time.
"""

from __future__ import annotations

import os

import pytest

from onnxopt import normalize, select
from onnxopt.importer import import_model
from onnxopt.legality.target import run_target
from onnxopt.normalize import shape_rules, shapes
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import fuse_and_settle

MODELS_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "models")
# One of each exporter, an encoder and decoders (the causal blocks' Loop bodies are subgraphs).
EXPORTS = ["gpt2.ts.onnx", "llama.dynamo.onnx", "bert.dynamo.onnx", "t5enc.ts.onnx",
           "gemma2.dynamo.onnx", "swin.dynamo.onnx"]


def _state(model) -> list:
    """Every node's outputs as inference left them, and each node's op (folds remove nodes)."""
    return [(node.name, node.op_type,
             [(o.name, o.dtype, o.shape, o.sym) for o in node.outputs])
            for graph in model.graph.all_graphs() for node in graph]


def _optimized(path: str) -> list:
    options = OptimizeOptions(target="cpu")
    model = import_model(path)
    normalize.run(model, options)
    target = run_target(options, model.opset)
    fuse_and_settle(model, options, target)
    select.run(model, options, target)
    normalize.run(model, options)
    return _state(model)


@pytest.mark.parametrize("name", EXPORTS)
def test_the_pipeline_ends_where_full_inference_ends(name, monkeypatch):
    path = os.path.join(MODELS_DIR, name)
    incremental = _optimized(path)
    monkeypatch.setattr(shapes, "_unchanged", lambda node: False)  # every node, every time
    assert incremental == _optimized(path)


def _counting(monkeypatch, op_type: str) -> list:
    """Count the calls of ``op_type``'s shape rule."""
    calls: list = []
    rule = shape_rules.RULES[op_type]

    def counted(node):
        calls.append(node.name)
        return rule(node)

    monkeypatch.setitem(shape_rules.RULES, op_type, counted)
    return calls


TEXT = """
g (float[batch, 8] x, float[batch, 8] z) => (float[?, ?] y, float[?, ?] w) {
    a = Relu (x)
    y = Sigmoid (a)
    w = Relu (z)
}"""


def test_a_node_nothing_reached_is_not_inferred_again(make_model, monkeypatch):
    model = import_model(make_model(TEXT))
    calls = _counting(monkeypatch, "Relu")
    shapes.infer_shapes(model)
    assert len(calls) == 2
    shapes.infer_shapes(model)
    assert len(calls) == 2


def test_a_changed_input_shape_is_inferred_downstream(make_model):
    model = import_model(make_model(TEXT))
    shapes.infer_shapes(model)
    relu, sigmoid, _ = list(model.graph)
    assert sigmoid.output.shape == ("batch", 8)
    model.graph.inputs[0].shape = ("batch", 16)
    shapes.infer_shapes(model)
    assert relu.output.shape == ("batch", 16)
    assert sigmoid.output.shape == ("batch", 16)


def test_a_rewired_input_is_inferred_again(make_model, monkeypatch):
    model = import_model(make_model(TEXT.replace("float[batch, 8] z", "float[batch, 4] z")))
    shapes.infer_shapes(model)
    _, sigmoid, other = list(model.graph)
    calls = _counting(monkeypatch, "Sigmoid")
    model.graph.set_input(sigmoid, 0, other.output)  # now reads the [batch, 4] Relu
    shapes.infer_shapes(model)
    assert calls == [sigmoid.name]
    assert sigmoid.output.shape[1] == 4


def test_a_changed_attribute_is_inferred_again(make_model):
    text = """
    g (float[2, 3, 5] x) => (float[?, ?, ?] y) {
        y = Transpose <perm = [2, 0, 1]> (x)
    }"""
    model = import_model(make_model(text))
    shapes.infer_shapes(model)
    (node,) = list(model.graph)
    assert node.output.shape == (5, 2, 3)
    node.attrs["perm"] = type(node.attrs["perm"])(node.attrs["perm"].type, (1, 0, 2))
    shapes.infer_shapes(model)
    assert node.output.shape[0] == 3


def test_a_changed_meaning_is_inferred_again(make_model):
    """A pass that folds a Transpose into a MatMul says so in ``sem``, not in attributes."""
    text = """
    g (float[3, 3] x, float[3, 5] w) => (float[?, ?] y) {
        y = MatMul (x, w)
    }"""
    model = import_model(make_model(text))
    shapes.infer_shapes(model)
    (node,) = list(model.graph)
    assert node.output.shape == (3, 5)
    node.sem["transpose_b"] = True
    shapes.infer_shapes(model)
    assert node.output.shape == (3, 3)


def test_an_output_a_pass_retyped_is_inferred_again(make_model):
    """What a rule computes overrides what a pass wrote, as when every node was inferred."""
    model = import_model(make_model(TEXT))
    shapes.infer_shapes(model)
    relu = next(iter(model.graph))
    relu.output.shape = ("batch", 99)
    shapes.infer_shapes(model)
    assert relu.output.shape == ("batch", 8)
