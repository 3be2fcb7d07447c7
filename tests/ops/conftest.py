"""Fixtures for the fused-op tests: a model of fused ops, each replaced by its own decomposition
(not by whatever kernel stage 6 would choose) and run in ONNX Runtime."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import pytest

from onnxopt.exporter import export_model_lazy
from onnxopt.importer import import_model
from onnxopt.ir.builder import FUSED_DOMAIN, NodeBuilder
from onnxopt.ir.edit import replace_value
from onnxopt.ops import FUSED_OPS


class Decomposed:
    """A fused-op model after selection bound every fused node to its decomposition."""

    def __init__(self, proto) -> None:
        self.proto = proto
        self.ops = [n.op_type for n in proto.graph.node]
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.session = ort.InferenceSession(proto.SerializeToString(), opts,
                                            providers=["CPUExecutionProvider"])

    def run(self, **feeds: np.ndarray) -> list[np.ndarray]:
        """Outputs for ``feeds`` (those the graph does not declare are left out)."""
        names = {i.name for i in self.session.get_inputs()}
        return self.session.run(None, {k: v for k, v in feeds.items() if k in names})


def decompose_all(model) -> None:
    """Replace every fused node of ``model`` by its decomposition, as stage 6 would bind it."""
    graph = model.graph
    for node in [n for n in graph if n.domain == FUSED_DOMAIN]:
        b = NodeBuilder(graph, node, "test")
        b.opset = model.opset
        for old, new in zip(node.outputs, FUSED_OPS[node.op_type].decompose(b, node)):
            new.dtype, new.shape = new.dtype or old.dtype, new.shape or old.shape
            assert replace_value(graph, old, new)
        graph.remove(node)


@pytest.fixture
def decompose_model() -> Callable[..., None]:
    """``decompose_model(model)``: every fused node of an IR model replaced by its decomposition."""
    return decompose_all


@pytest.fixture
def decompose(make_model) -> Callable[..., Decomposed]:
    """``decompose(text, opset=18)``: a graph using ``ai.onnxopt`` ops, decomposed, in ORT."""

    def run(text: str, *, opset: int = 18) -> Decomposed:
        model = import_model(make_model(text, opset=opset, extra_opsets={FUSED_DOMAIN: 1}))
        decompose_all(model)
        proto, _ = export_model_lazy(model)
        assert not any(n.domain for n in proto.graph.node), "a fused op was not decomposed"
        return Decomposed(proto)

    return run


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
