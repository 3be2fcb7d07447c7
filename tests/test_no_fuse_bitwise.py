"""Where nothing is fused, the output computes bit for bit what the input did (issue 28).

``--no-fuse`` is a round trip (import and export) and trivially so. The stronger claim is
tested here: normalization alone (``rules=False``: folding, dead code, common subexpressions,
every canonical form), with nothing fused, so that no non-exact rewrite may stay. On every
model of ``models/`` and on a slice of the fuzz suite's cases, the outputs are bitwise those
of the input, NaN payloads and signed zeros included, on inputs with padding and several
lengths — with ONNX Runtime running each model's ops as written (its graph optimizations
off: at its default level ORT applies non-exact fusions of its own, a LayerNorm or GELU
recognised, and whether they match depends on how the graph is spelled).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxopt
from onnxopt import evaluation
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.verification import compare

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz import cases, seeds
from fuzz.harness import deterministic, ort_session, run_original
from fuzz.pool import build_case

ROOT = Path(__file__).resolve().parent.parent
OTHER = [p for folder in ("with_past", "other")
         for p in sorted((ROOT / "models" / folder).glob("*.onnx"))]
FUZZ_SEED = 20240611


@pytest.fixture
def ops_as_written(monkeypatch):
    """Verification's sessions with ORT's graph optimizations off."""
    plain = evaluation.session
    monkeypatch.setattr(compare.evaluation, "session",
                        lambda *a, **k: plain(*a, **{**k, "optimize": False}))


def _normalized(source, tmp_path: Path) -> Path:
    out = tmp_path / "normalized.onnx"
    onnxopt.optimize(source, output=out, rules=False)
    return out


@pytest.mark.parametrize("path", OTHER, ids=[p.name for p in OTHER])
def test_other_folders_normalized_are_bitwise(path: Path, tmp_path: Path, ops_as_written):
    report = onnxopt.verify(path, _normalized(str(path), tmp_path))
    assert report.ok and report.bitwise, [(o.name, o.max_abs) for o in report.outputs]


def test_models_normalized_are_bitwise(model_path: Path, tmp_path: Path, ops_as_written):
    report = onnxopt.verify(model_path, _normalized(str(model_path), tmp_path))
    assert report.ok and report.bitwise, [(o.name, o.max_abs) for o in report.outputs]


def test_no_fuse_is_a_bitwise_round_trip(models_dir: Path, tmp_path: Path):
    out = tmp_path / "round_trip.onnx"
    onnxopt.optimize(models_dir / "bert.ts.onnx", output=out, fuse=False)
    assert onnxopt.verify(models_dir / "bert.ts.onnx", out).bitwise


def test_normalization_alone_still_rewrites(models_dir: Path):
    """Not a round trip: folding, dead code and the exact canonical forms do their work."""
    result = run_pipeline(str(models_dir / "gpt2.ts.onnx"), OptimizeOptions(rules=False))
    assert sum(result.report.nodes_after.values()) < sum(result.report.nodes_before.values())
    assert result.report.stages["exactness"].policy.inexact is False


def _same_bits(a, b) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) \
            and all(_same_bits(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "OUS":
        return bool(np.array_equal(a, b))
    return a.tobytes() == b.tobytes()


FUZZ_CASES = cases.mix(200, 100, FUZZ_SEED, seeds.seed_names())


@pytest.mark.parametrize("recipe", FUZZ_CASES, ids=[r["case_id"] for r in FUZZ_CASES])
def test_fuzz_case_normalized_is_bitwise(recipe, tmp_path: Path):
    case = build_case(recipe)
    model_path = tmp_path / "in.onnx"
    model_path.write_bytes(case.data)
    for name, data in case.extra_files.items():
        (tmp_path / name).write_bytes(data)
    original = run_original(str(model_path), seed=1)
    if original is None:
        pytest.skip("ONNX Runtime does not run this case")
    sess, feeds, ref = original
    if not deterministic(sess, feeds, ref):
        pytest.skip("the case's outputs vary from run to run")
    try:
        proto = onnx.load(str(model_path), load_external_data=False)
        out = tmp_path / "out.onnx"
        onnxopt.optimize(str(model_path) if case.extra_files else proto, output=out,
                         rules=False)
    except onnxopt.errors.OnnxoptError as e:
        pytest.skip(f"onnxopt refuses it: {e}")
    got = ort_session(str(out)).run(None, feeds)  # (ORT optimizations off, as for ref)
    names = [o.name for o in sess.get_outputs()]
    assert all(_same_bits(r, g) for r, g in zip(ref, got)), \
        [n for n, r, g in zip(names, ref, got) if not _same_bits(r, g)]
