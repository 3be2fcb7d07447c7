"""One target per run: the driver builds it once and hands the same one to fusion (stage 4's
legality) and selection (stage 6), so the two cannot disagree about the opset or the device."""

from __future__ import annotations

import onnx

from onnxopt import fuse, select
from onnxopt.legality import target as target_module
from onnxopt.legality.target import run_target
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline


def test_the_opset_bound_is_the_option_else_the_models_own():
    assert run_target(OptimizeOptions(target="cpu"), 17).opset == 17
    assert run_target(OptimizeOptions(target="cpu", opset=14), 17).opset == 14
    assert run_target(OptimizeOptions(target="cpu"), 0).opset == 1  # a model without one


def test_a_run_builds_one_target_and_every_stage_reads_it(models_dir, monkeypatch):
    built, seen = [], []

    def counted(*args, **kwargs):
        built.append(made := make_target(*args, **kwargs))
        return made

    def watching(stage):
        def run(model, options, target, **kwargs):
            seen.append((stage.__module__, target))
            return stage(model, options, target, **kwargs)
        return run

    make_target = target_module.make_target
    monkeypatch.setattr(target_module, "make_target", counted)
    monkeypatch.setattr(fuse, "run", watching(fuse.run))
    monkeypatch.setattr(select, "run", watching(select.run))
    path = models_dir / "gpt2.ts.onnx"
    result = run_pipeline(str(path), OptimizeOptions(target="cpu"))
    settings = result.report.to_json()["target"]

    (target,) = built
    assert {stage for stage, _ in seen} == {"onnxopt.fuse", "onnxopt.select"}
    assert all(t is target for _, t in seen)
    imports = onnx.load(str(path), load_external_data=False).opset_import
    assert target.opset == next(o.version for o in imports if o.domain in ("", "ai.onnx"))
    assert settings["device"] == target.device == "cpu"
