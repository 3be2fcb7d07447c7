"""Shared check for normalization passes: parse ONNX text, import, run a pass, export, compare.

A fixture rather than an importable module, so the tests do not depend on
pytest's import mode or on other folders' conftest files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

from onnxopt.exporter import export_model
from onnxopt.importer import import_model
from onnxopt.ir.model import Model
from onnxopt.ir.printer import format_graph
from onnxopt.ir.verifier import verify_graph


def parse(text: str, opset: int = 18, extra: str = "") -> onnx.ModelProto:
    """An ONNX-text graph with the standard header (IR version 10: ORT 1.31 rejects onnx's 14)."""
    header = f'<ir_version: 10, opset_import: ["" : {opset}{extra}]>\n'
    proto = onnx.parser.parse_model(header + text)
    proto.ir_version = 10
    return proto


def feeds_for(proto: onnx.ModelProto, seed: int = 0, dim: int = 3) -> dict[str, np.ndarray]:
    """Random inputs; every symbolic dimension gets size ``dim``."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in proto.graph.initializer}
    feeds = {}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dim for d in tt.shape.dim]
        np_type = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np_type == np.bool_:
            feeds[vi.name] = rng.integers(0, 2, size=shape).astype(bool)
        elif np.issubdtype(np_type, np.integer):
            feeds[vi.name] = rng.integers(0, 4, size=shape).astype(np_type)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np_type)
    return feeds


def run_ort(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@dataclass
class PassResult:
    model: Model
    changes: int
    before: str
    after: str

    @property
    def ops(self) -> list[str]:
        return [n.op_type for n in self.model.graph]

    @property
    def unchanged(self) -> bool:
        return self.changes == 0 and self.before == self.after

    def node(self, op_type: str):
        return next(n for n in self.model.graph if n.op_type == op_type)


def check_pass(text: str | onnx.ModelProto, fn: Callable[[Model], int], *, opset: int = 18,
               run: bool = True, rtol: float = 1e-5, dim: int = 3, seeds: int = 2) -> PassResult:
    """Import, run ``fn``, verify the IR, export, and compare with the original in ORT."""
    proto = text if isinstance(text, onnx.ModelProto) else parse(text, opset)
    model = import_model(proto)
    before = format_graph(model.graph)
    changes = fn(model)
    changes = getattr(changes, "changed", changes)  # a pass's record, or a helper's count
    verify_graph(model.graph)
    after = format_graph(model.graph)
    if run:
        exported = export_model(model)
        onnx.checker.check_model(exported)
        for seed in range(seeds):
            feeds = feeds_for(proto, seed, dim)
            want = run_ort(proto, feeds)
            got = run_ort(exported, feeds)
            assert len(want) == len(got)
            for w, g in zip(want, got):
                assert w.shape == g.shape and w.dtype == g.dtype
                if w.dtype.kind in "fc":
                    np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, equal_nan=True)
                else:
                    np.testing.assert_array_equal(g, w)
    return PassResult(model, changes, before, after)


@pytest.fixture
def check() -> Callable[..., PassResult]:
    """``check(text, pass_fn)``: run a pass on an ONNX-text graph and check it (see check_pass)."""
    return check_pass


@pytest.fixture
def onnx_text() -> Callable[..., onnx.ModelProto]:
    return parse
