"""The safeguard's checks run at every size, in memory that does not grow with the weights
(issue 29). They used to be skipped above 16 MB of external data ("not loaded: its external
data is too large to load twice"), which is every LLM export. The model here is LLaMA-7B's
widths with two layers: 1.24 GiB of float16 weights in external data, written as a sparse
file (holes: no disk time), built by benchmarks/llama_shaped.py and removed afterwards."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from onnx import TensorProto

import onnxopt
from onnxopt import fuse
from onnxopt.ir.dtypes import dtype_code
from onnxopt.rules import all_rules
from onnxopt.rules.attention import Attention

ROOT = Path(__file__).resolve().parents[2]


def _llama_shaped():
    spec = importlib.util.spec_from_file_location("llama_shaped",
                                                  ROOT / "benchmarks" / "llama_shaped.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


LLAMA = _llama_shaped()


@pytest.fixture(scope="module")
def large_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("at_size")
    path = LLAMA.build(str(folder), LLAMA.Shape(layers=2))
    assert os.path.getsize(path + ".data") >= 1 << 30
    yield path
    shutil.rmtree(folder, ignore_errors=True)


def test_a_model_over_a_gigabyte_is_checked_in_bounded_memory(large_model, tmp_path):
    weights = os.path.getsize(large_model + ".data")
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = LLAMA.measure([sys.executable, "-m", "onnxopt", "optimize", large_model, "-o", str(out),
                         "--target", "cpu", "--json", str(report)], env=env)
    print(f"optimize: {run.seconds:.1f} s, peak RSS {run.max_rss / 2**20:.0f} MiB (largest "
          f"process), {run.tree_rss / 2**20:.0f} MiB (process tree) for "
          f"{weights / 2**30:.2f} GiB of weights")
    assert run.returncode == 0, run.stderr
    assert "not loaded" not in run.stdout + run.stderr
    data = json.loads(report.read_text())
    assert data["safeguard"] == {"checks": "passed"}
    assert data["fuse"]["summary"]["attention"]["fused"] == 2
    # The checks (and the whole command) hold no weight in memory: every process stays far
    # below the weights' size, and so do all of them together.
    assert run.max_rss < weights / 6
    assert run.tree_rss < weights / 3
    for path in (out, Path(f"{out}.data")):
        path.unlink()


class RefusedAttention(Attention):
    """The attention rule, its output then cast to uint8 and negated: ORT refuses the type."""

    def rewrite(self, b, m, facts):
        out = super().rewrite(b, m, facts)
        return b.op("Cast", b.op("Neg", b.op("Cast", out, to=TensorProto.UINT8)),
                    to=dtype_code(m.v.dtype))


def test_at_that_size_a_result_onnx_runtime_refuses_is_held_back(large_model, monkeypatch):
    """The load really runs at this size: a result ORT refuses (and the ONNX checker passes)
    is held back, with ORT's reason."""
    monkeypatch.setattr(fuse, "all_rules", lambda: [
        RefusedAttention() if r.name == "attention" else r for r in all_rules()])
    result = onnxopt.optimize(large_model, target="cpu", return_result=True)
    guard = result.report.stages["safeguard"]
    assert guard["fallback"] == "partial"
    assert [e["rule"] for e in guard["lost"]] == ["attention", "attention"]
    assert all(e["reason"].startswith("ONNX Runtime cannot load it: ") and "Neg" in e["reason"]
               for e in guard["lost"])
    assert result.report.stages["fuse"].count("rms_norm") > 0
