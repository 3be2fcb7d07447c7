"""Fixtures for the kernel-selection tests: ONNX-text graphs holding a fused node, bound to a
chosen kernel, run in ONNX Runtime (CPU) next to the node's decomposition."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxopt import select
from onnxopt.exporter import export_model
from onnxopt.importer import import_model
from onnxopt.legality.target import run_target
from onnxopt.options import OptimizeOptions
from onnxopt.select.registry import default_registry


def session(proto: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


class Bound:
    """A model whose fused nodes were bound by the select stage: its proto and report."""

    def __init__(self, proto: onnx.ModelProto, report) -> None:
        self.proto = proto
        self.report = report
        self.ops = [n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                    for n in proto.graph.node]

    @property
    def chosen(self) -> list[str]:
        return [s.chosen.name for s in self.report.selections]

    def run(self, feeds: dict) -> list[np.ndarray]:
        return session(self.proto).run(None, feeds)


@pytest.fixture(scope="session")
def registry():
    return default_registry()


@pytest.fixture(scope="session")
def kernel(registry) -> Callable[[str], object]:
    by_name = {k.name: k for k in registry}
    return lambda name: by_name[name]


@pytest.fixture
def bind_text(make_model, kernel) -> Callable[..., Bound]:
    """``bind_text(text, "ort.MultiHeadAttention", opset=18)``: parse, import, select with only
    that kernel in the registry (the decomposition when it is illegal), export."""

    def run(text: str, kernel_name: str | None = None, *, opset: int = 18,
            options: OptimizeOptions | None = None, registry=None) -> Bound:
        proto = make_model(text, opset=opset, extra_opsets={"ai.onnxopt": 1})
        model = import_model(proto)
        if registry is None and kernel_name is not None:
            registry = [kernel(kernel_name)]
        options = options or OptimizeOptions(target="cpu")
        report = select.run(model, options, run_target(options, model.opset), registry=registry)
        return Bound(export_model(model), report)

    return run


@pytest.fixture(name="rel_err")
def rel_err_fixture() -> Callable[[np.ndarray, np.ndarray], float]:
    return rel_err


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """Max abs difference over the reference's scale; NaN must sit in the same places."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN in different places"
    ok = ~np.isnan(want)
    if not ok.any():
        return 0.0
    return float(np.abs(got[ok] - want[ok]).max() / max(1e-30, np.abs(want[ok]).max()))


@pytest.fixture
def check_kernel(bind_text) -> Callable[..., Bound]:
    """Bind ``text`` with ``kernel_name`` and with the decomposition; assert the kernel was
    chosen and every output matches the decomposition in ORT (rel err < ``tol``)."""

    def run(text: str, kernel_name: str, feeds: dict, *, opset: int = 18,
            tol: float = 1e-4) -> Bound:
        bound = bind_text(text, kernel_name, opset=opset)
        assert bound.chosen and set(bound.chosen) == {kernel_name}, \
            [(s.chosen.name, s.rejected) for s in bound.report.selections]
        onnx.checker.check_model(bound.proto)
        op = bound.report.selections[0].op
        reference = bind_text(text, f"decompose.{op}", opset=opset)
        for got, want in zip(bound.run(feeds), reference.run(feeds)):
            assert rel_err(got, want) < tol
        return bound

    return run
