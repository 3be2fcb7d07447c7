"""The driver keeps the cyclic collector off the imported IR while the stages run, and hands
it back afterwards: a process optimizing model after model must free each one."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from onnxopt import pipeline
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline

MODEL = str(Path(__file__).resolve().parents[1] / "models" / "bert.ts.onnx")


def _frozen_in_stages(monkeypatch) -> list[int]:
    seen: list[int] = []
    real = pipeline.normalize.run

    def normalize_run(model, options):
        seen.append(gc.get_freeze_count())
        return real(model, options)

    monkeypatch.setattr(pipeline.normalize, "run", normalize_run)
    return seen


def test_the_imported_ir_is_frozen_while_the_stages_run_and_thawed_after(monkeypatch):
    assert gc.get_freeze_count() == 0
    seen = _frozen_in_stages(monkeypatch)
    run_pipeline(MODEL, OptimizeOptions(target="cpu"))
    assert seen and all(count > 0 for count in seen)
    assert gc.get_freeze_count() == 0


def test_a_callers_own_freeze_is_left_as_it_was(monkeypatch):
    seen = _frozen_in_stages(monkeypatch)
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        run_pipeline(MODEL, OptimizeOptions(target="cpu"))
        # (Frozen objects may still be freed by their counts: the count only falls.)
        assert seen and all(count <= before for count in seen)  # nothing frozen on top
        assert gc.get_freeze_count() <= before
    finally:
        gc.unfreeze()


def test_a_stage_that_raises_still_thaws(monkeypatch):
    def broken(model, options):
        raise RuntimeError("boom")

    monkeypatch.setattr(pipeline.select, "run", broken)
    with pytest.raises(pipeline.StageFailure):
        run_pipeline(MODEL, OptimizeOptions(target="cpu"))
    assert gc.get_freeze_count() == 0


def test_a_dropped_result_is_collected():
    """Its IR's cycles (nodes and values refer to each other) are found by a collection: they
    were handed back to the collector (frozen ones would not be)."""
    result = run_pipeline(MODEL, OptimizeOptions(target="cpu"))
    nodes = len(result.model.graph)
    gc.collect()
    del result
    assert gc.collect() > nodes


def test_the_collector_is_on_again_after_a_run_that_fails(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(pipeline.OnnxoptError):
        run_pipeline(str(bad), OptimizeOptions(target="cpu"))
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_no_collection_walks_the_ir_before_it_is_frozen(monkeypatch):
    """Import leaves everything it made young; were the collector on when it returned, the
    next collection would walk all of it (0.5 s on a graph of 104,000 nodes). It is off until
    the IR is frozen, and on again for the stages."""
    states = []
    real_import = pipeline.import_model

    def import_model(*args, **kwargs):
        model = real_import(*args, **kwargs)
        states.append(("imported", gc.isenabled()))
        return model

    real_normalize = pipeline.normalize.run

    def normalize_run(model, options):
        states.append(("stage", gc.isenabled() and gc.get_freeze_count() > 0))
        return real_normalize(model, options)

    monkeypatch.setattr(pipeline, "import_model", import_model)
    monkeypatch.setattr(pipeline.normalize, "run", normalize_run)
    run_pipeline(MODEL, OptimizeOptions(target="cpu"))
    assert states[0] == ("imported", False)
    assert states[1:] and all(state == ("stage", True) for state in states[1:])
    assert gc.isenabled()
