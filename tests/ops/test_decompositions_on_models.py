"""Fused, then decomposed again, every model computes what the original did: the decompositions
follow the exporters' operation order, so float32 results stay within 1e-5 relative."""

from __future__ import annotations

from collections import Counter

from onnxopt import normalize
from onnxopt.exporter import export_model_lazy
from onnxopt.fuse import fuse
from onnxopt.importer import import_model
from onnxopt.legality.target import Target
from onnxopt.options import OptimizeOptions
from onnxopt.rules import all_rules
from onnxopt.verification import verify_models

OURS = ("LayerNormFused", "RMSNormFused", "GroupNormFused", "GeluFused", "SiluFused", "SwiGLUFused",
        "RotaryFused")


def test_decomposed_model_matches_the_original(model_path, decompose_model):
    model = import_model(str(model_path))
    normalize.run(model, OptimizeOptions())
    fuse(model, all_rules(), Target())
    fused = Counter(n.op_type for n in model.graph if n.op_type in OURS)
    assert fused
    decompose_model(model)
    proto, _ = export_model_lazy(model)
    report = verify_models(str(model_path), proto, runs=2, rtol=1e-5)
    assert report.ok, report.to_json()
