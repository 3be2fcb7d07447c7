"""Every name a model uses is reserved on import (issue 28): a model that already holds the
names onnxopt gives its own nodes and values keeps every fusion, and the output has no name
twice (ONNX Runtime refuses a graph with two nodes of one name; the safeguard would then hold
the fusions back)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxopt.importer.names_in_use import names_in_use
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.safeguard import optimize_guarded

ROOT = Path(__file__).resolve().parents[2]


def _optimize(model: onnx.ModelProto):
    return optimize_guarded(model, OptimizeOptions(target="cpu"))


def _fusions(result) -> dict[str, int]:
    summary = result.report.stages["fuse"].summary()
    return {rule: entry["fused"] for rule, entry in summary.items()}


def _graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g)


def _created_names(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    """The node names and value names onnxopt gives what it creates in ``model``."""
    before = names_in_use(model)
    out = run_pipeline(model, OptimizeOptions(target="cpu")).whole_proto()
    nodes = [n.name for g in _graphs(out.graph) for n in g.node if n.name and n.name not in before]
    values = [v for g in _graphs(out.graph) for n in g.node for v in n.output
              if v and v not in before]
    return sorted(set(nodes)), sorted(set(values))


def _rename_values(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    for g in _graphs(graph):
        for node in g.node:
            node.input[:] = [names.get(v, v) for v in node.input]
            node.output[:] = [names.get(v, v) for v in node.output]
        for vi in g.value_info:
            vi.name = names.get(vi.name, vi.name)


def _assert_unique_node_names(proto: onnx.ModelProto) -> None:
    for g in _graphs(proto.graph):
        counts = Counter(n.name for n in g.node if n.name)
        assert not [n for n, k in counts.items() if k > 1], g.name


def _check(original: onnx.ModelProto, renamed: onnx.ModelProto) -> None:
    expected = _fusions(_optimize(original))
    result = _optimize(renamed)
    assert result.report.stages["safeguard"]["checks"] == "passed"
    assert _fusions(result) == expected
    proto = result.whole_proto()
    _assert_unique_node_names(proto)
    ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def bert() -> onnx.ModelProto:
    return onnx.load(ROOT / "models" / "bert.ts.onnx")


def test_nodes_named_like_onnxopts_own(bert):
    created, _ = _created_names(bert)
    assert created, "onnxopt names some node of its own in this model"
    renamed = onnx.ModelProto()
    renamed.CopyFrom(bert)
    for node, name in zip(renamed.graph.node, created):
        node.name = name
    _check(bert, renamed)


def test_a_node_named_transpose_beside_attention(bert):
    """The case from the field: ONNX Runtime's optimizer names nodes after their op."""
    renamed = onnx.ModelProto()
    renamed.CopyFrom(bert)
    for k, node in enumerate(n for n in renamed.graph.node if n.op_type == "Gather"):
        node.name = "Transpose" if k == 0 else f"Transpose_{k}"
    _check(bert, renamed)


def test_values_named_like_onnxopts_own(bert):
    _, created = _created_names(bert)
    renamed = onnx.ModelProto()
    renamed.CopyFrom(bert)
    outputs = {o.name for o in renamed.graph.output}
    own = [v for n in renamed.graph.node for v in n.output if v and v not in outputs]
    _rename_values(renamed.graph, dict(zip(own, created)))
    _check(bert, renamed)


def test_subgraph_names_like_onnxopts_own():
    model = onnx.load(ROOT / "models" / "other" / "merged_decoder_llama.onnx")
    created, _ = _created_names(model)
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    bodies = [g for g in _graphs(renamed.graph) if g is not renamed.graph]
    assert bodies
    names = iter(created)
    for body in bodies:
        for node, name in zip(body.node, names):
            node.name = name
    _check(model, renamed)


def test_function_names_like_onnxopts_own(bert):
    """A model-local function (ONNX Runtime inlines it into the graph) whose nodes and values
    hold the names onnxopt creates."""
    created_nodes, created_values = _created_names(bert)
    body = [helper.make_node("Identity", ["x"], [created_values[0]], name=created_nodes[0]),
            helper.make_node("Neg", [created_values[0]], ["y"], name=created_nodes[1])]
    function = helper.make_function("local", "negate", ["x"], ["y"], body,
                                    [helper.make_opsetid("", 17)])
    model = onnx.ModelProto()
    model.CopyFrom(bert)
    model.functions.append(function)
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.ones(2, np.float32), "two"))
    model.graph.node.append(helper.make_node("negate", ["two"], ["negated"], domain="local"))
    model.graph.output.append(helper.make_tensor_value_info("negated", TensorProto.FLOAT, [2]))
    _check(model, model)
    assert {created_nodes[0], created_values[0]} <= names_in_use(model)
