"""Every model in models/, optimized for --target cpu, runs in plain ONNX Runtime — in a
subprocess where onnxopt cannot be imported — and computes what the original computes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import pytest

from onnxopt.exporter import save_model
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted((ROOT / "models").glob("*.onnx"))

# Runs with ``python -I`` (no cwd, PYTHONPATH or user site on sys.path) from a folder outside
# the repository, and blocks the package by name as well, for an editable install.
CHECK = textwrap.dedent("""
    import json, sys
    sys.modules["onnxopt"] = None
    try:
        import onnxopt  # noqa: F401
        raise SystemExit("onnxopt is importable")
    except ImportError:
        pass
    import numpy as np
    import onnxruntime as ort

    def session(path):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    def feeds(sess, batch, seq, rng):
        out = {}
        if any(i.name == "input_values" for i in sess.get_inputs()):
            seq *= 40  # speech: audio samples (the conv front end makes a frame of 10)
        for i in sess.get_inputs():
            if i.name == "pixel_values":
                out[i.name] = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
            elif i.name == "input_values":
                out[i.name] = rng.standard_normal((batch, seq)).astype(np.float32)
            elif i.name == "attention_mask":
                m = np.ones((batch, seq), np.int64)
                m[1:, seq - seq // 4:] = 0  # right padding in every row but the first
                out[i.name] = m
            else:
                out[i.name] = rng.integers(2, 1000, (batch, seq)).astype(np.int64)
        return out

    results = {}
    for original, optimized in json.loads(sys.argv[1]):
        a, b = session(original), session(optimized)
        worst = 0.0
        for batch, seq in ((1, 7), (2, 16)):
            f = feeds(a, batch, seq, np.random.default_rng(batch * 100 + seq))
            for x, y in zip(a.run(None, f), b.run(None, f)):
                scale = max(1.0, float(np.abs(x).max()))
                worst = max(worst, float(np.abs(x - y).max()) / scale)
        results[optimized] = worst
    print(json.dumps({"results": results, "onnxopt_loaded": "onnxopt" in sys.modules
                      and sys.modules["onnxopt"] is not None}))
""")


@pytest.fixture(scope="module")
def optimized(tmp_path_factory) -> dict[str, tuple[Path, object]]:
    out_dir = tmp_path_factory.mktemp("plain_ort")
    done = {}
    for path in MODELS:
        result = run_pipeline(str(path), OptimizeOptions(target="cpu"))
        out = out_dir / path.name.replace(".onnx", ".opt.onnx")
        save_model(result.proto, result.external, str(out))
        done[path.name] = (out, result)
    return done


@pytest.fixture(scope="module")
def plain_ort_errors(optimized, tmp_path_factory) -> dict[str, float]:
    pairs = [(str(ROOT / "models" / name), str(out)) for name, (out, _) in optimized.items()]
    proc = subprocess.run([sys.executable, "-I", "-c", CHECK, json.dumps(pairs)],
                          capture_output=True, text=True, cwd=tmp_path_factory.mktemp("elsewhere"),
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not data["onnxopt_loaded"]
    return {Path(k).name.replace(".opt.onnx", ".onnx"): v for k, v in data["results"].items()}


@pytest.mark.parametrize("name", [p.name for p in MODELS])
def test_optimized_model_runs_in_plain_ort_and_matches(name, optimized, plain_ort_errors):
    out, result = optimized[name]
    onnx.checker.check_model(str(out))
    assert plain_ort_errors[name] < 1e-4
    # Only what plain ONNX Runtime knows: no fused op left, no onnxopt custom-op domain.
    domains = {n.domain for n in onnx.load(str(out)).graph.node}
    assert domains <= {"", "ai.onnx", "com.microsoft"}, domains
    selection = result.report.stages.get("select")
    assert selection is not None and selection.selections, "nothing was bound"
    for s in selection.selections:
        assert "CPUExecutionProvider" in s.chosen.providers, (s.node, s.chosen.name)


def test_cuda_only_kernels_are_rejected_for_cpu_with_a_reason(optimized):
    reasons = {reason for _, (_, result) in optimized.items()
               for s in result.report.stages["select"].selections
               for k, reason in s.rejected if k.providers == frozenset({"CUDAExecutionProvider"})}
    assert {str(r) for r in reasons} == {"runs only on CUDA"}
    assert {r.code for r in reasons} == {"provider_not_supported"}
