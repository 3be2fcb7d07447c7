"""All normalization passes on every model in models/: same function, fewer nodes, canonical forms."""

from __future__ import annotations

import glob
import os
from collections import Counter

import onnx
import pytest

import onnxopt
from onnxopt.exporter import export_model
from onnxopt.importer import import_model
from onnxopt.ir.verifier import verify_graph
from onnxopt.normalize.driver import PASSES, run_passes
from onnxopt.normalize.shapes import infer_shapes

MODELS_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "models")
MODELS = sorted(glob.glob(os.path.join(MODELS_DIR, "*.onnx")))


def _count(model) -> int:
    return sum(1 for _ in model.graph.all_nodes())


def _with_shapes(model):
    """The whole normalize stage: the lead's shape inference first, then these passes."""
    passes = [("shapes", infer_shapes), *PASSES]
    return run_passes(model, debug=True, passes=passes)


@pytest.mark.parametrize("stage", ["passes", "with_shapes"])
@pytest.mark.parametrize("path", MODELS, ids=[os.path.basename(p) for p in MODELS])
def test_normalized_model_computes_the_same(path, stage, tmp_path):
    model = import_model(path)
    before = _count(model)
    counts = run_passes(model, debug=True) if stage == "passes" else _with_shapes(model)
    verify_graph(model.graph)
    after = _count(model)
    print(f"{os.path.basename(path)} ({stage}): {before} -> {after} nodes; {counts}")
    # unmerge_heads makes 3-D attention 4-D by splitting computed operands with a run-time
    # shape (Shape, Slice, Concat, Reshape): VITS's relative-position terms stay 3-D around
    # the 4-D chain, so its normalized graph can be larger. The optimized model never is
    # (tests/rules/test_relative_position_attention.py).
    assert after < before or "unmerge_heads" in counts

    out = tmp_path / "normalized.onnx"
    onnx.save(export_model(model), str(out))
    report = onnxopt.verify(path, str(out))
    assert report.ok, report.to_json()

    # a second run finds nothing left to do (the driver reached a fixed point)
    assert run_passes(model) == {}

    ops = Counter(n.op_type for n in model.graph)
    assert ops["Identity"] == 0 and ops["Dropout"] == 0
    for node in model.graph:
        if node.op_type == "Softmax":
            assert node.sem.get("stable") is True
        if node.op_type in ("Add", "Mul") and len(node.inputs) == 2:
            assert node.inputs[0].const is None or node.inputs[1].const is not None


def test_models_are_present():
    assert len(MODELS) >= 14
