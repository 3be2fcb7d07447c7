"""Fixtures for the fusion-rule tests: small ONNX-text graphs fused with chosen rules, and the
real models run once per session through the fuse stage and through the whole pipeline."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from onnxopt import normalize
from onnxopt.fuse import fuse
from onnxopt.importer import import_model
from onnxopt.legality.target import Target
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.rules import all_rules
from onnxopt.verification import verify_models


class Fused:
    """A model after normalize + fuse: its IR, the fusion report, the ops left."""

    def __init__(self, model, report) -> None:
        self.model = model
        self.report = report
        self.ops = Counter(n.op_type for n in model.graph)

    def nodes(self, op_type: str) -> list:
        return [n for n in self.model.graph if n.op_type == op_type]

    def reasons(self, family: str, status: str = "refused") -> list[str]:
        return [r.detail for r in self.report.regions
                if r.family == family and r.status == status]

    def codes(self, family: str, status: str = "refused") -> list[str]:
        return [r.code for r in self.report.regions
                if r.family == family and r.status == status]


def _fuse(model, rules, target) -> Fused:
    normalize.run(model, OptimizeOptions())
    return Fused(model, fuse(model, rules, target or Target(), debug=True))


@pytest.fixture
def fuse_text(make_model) -> Callable[..., Fused]:
    """``fuse_text(text, [Rule()], opset=18)``: parse, import, normalize, fuse with those rules."""

    def run(text: str, rules=None, *, opset: int = 18, target: Target | None = None) -> Fused:
        return _fuse(import_model(make_model(text, opset=opset)), rules or all_rules(), target)

    return run


@pytest.fixture
def optimize_text(make_model) -> Callable[..., tuple]:
    """``optimize_text(text)``: the whole pipeline; returns (result, verify report vs original)."""

    def run(text: str, *, opset: int = 18):
        proto = make_model(text, opset=opset)
        result = run_pipeline(proto, OptimizeOptions(target="cpu", debug=True))
        return result, verify_models(proto, result.proto, runs=2)

    return run


@pytest.fixture(scope="session")
def fused_model(models_dir) -> Callable[[str], Fused]:
    """``fused_model("llama.ts")``: the model after normalize + fuse with every rule (cached)."""

    cache: dict[str, Fused] = {}

    def get(name: str) -> Fused:
        if name not in cache:
            cache[name] = _fuse(import_model(str(models_dir / f"{name}.onnx")), all_rules(), None)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def optimized_model(models_dir) -> Callable[[str], tuple]:
    """``optimized_model("llama.ts")``: (pipeline result, verify report vs the original), cached."""

    cache: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        if name not in cache:
            path = str(models_dir / f"{name}.onnx")
            result = run_pipeline(path, OptimizeOptions(target="cpu"))
            cache[name] = (result, verify_models(path, result.proto, runs=2))
        return cache[name]

    return get
