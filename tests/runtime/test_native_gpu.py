"""libonnxopt_ops on a real GPU: the CUDA kernels through the library, against its host
implementations (themselves held to the float64 references on CPU). Marked ``gpu`` and skipped,
with the reason, where no device can run the kernels. The GPU check (benchmarks/gpu_check.sh)
runs these where ONNX Runtime has no CUDA provider: the staged CPU kernels then drive the real
kernels through device memory."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnx.parser
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.runtime import cuda_available, library, session
from onnxopt.runtime.ops.examples import attention_feeds, attention_model, with_float32_io
from onnxopt.verification.inputs import make_inputs

REASON = cuda_available.device_unavailable_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"gpu: {REASON}")]
HAS_CUDA_EP = cuda_available.unavailable_reason() is None


def _cases(models_dir):
    """(name, model, feeds, tolerance): the examples in each dtype the kernels take (bfloat16
    through float32 casts at the boundary, which the Python binding needs), and whole models."""
    for kw in ({}, {"head_size": 128, "causal": False}, {"head_size": 256, "kv_heads": 8},
               {"dtype": "bfloat16"}, {"dtype": "float32", "head_size": 96}):
        model = with_float32_io(attention_model(**kw))
        tol = 1e-4 if kw.get("dtype") == "float32" else 2e-2
        yield f"attention {kw}", model, attention_feeds(model, 2, 77, pad=(0, 13)), tol
    for name in ("llama.dynamo", "gpt2.ts", "mistral.ts", "t5enc.dynamo"):
        model = onnx.load(str(models_dir / f"{name}.onnx"))
        yield name, model, make_inputs(model, {"batch": 2, "other": 21}, seed=0), 1e-4
    model = onnx.load(str(models_dir / "diffusion.ts.onnx"))
    yield "diffusion", model, make_inputs(model, {"batch": 2}, seed=0), 1e-4


def _host(proto, feeds):
    return session(proto, providers=["CPUExecutionProvider"]).run(None, feeds)


def _rel(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def test_staged_kernels_match_the_host_implementations(models_dir):
    for name, model, feeds, tol in _cases(models_dir):
        proto = run_pipeline(model, OptimizeOptions(target="cuda")).proto
        got = session(proto, providers=["CPUExecutionProvider"], staged=True).run(None, feeds)
        want = _host(proto, feeds)
        assert max(_rel(g, w) for g, w in zip(got, want)) < tol, name


@pytest.mark.skipif(not HAS_CUDA_EP, reason="this onnxruntime has no CUDAExecutionProvider")
def test_cuda_provider_runs_the_kernels_on_its_stream(models_dir):
    for name, model, feeds, tol in _cases(models_dir):
        proto = run_pipeline(model, OptimizeOptions(target="cuda")).proto
        sess = session(proto, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
        got = sess.run(None, feeds)
        want = _host(proto, feeds)
        assert max(_rel(g, w) for g, w in zip(got, want)) < tol, name


USES_THE_GPU = r"""
import sys
import numpy as np
import onnxruntime as ort
from onnxopt.runtime.cuda import loader, pycuda_backend
loader.ensure_context()  # PyCUDA pushes the primary context; it must be popped at exit
pycuda_backend.mem_alloc(1024)
options = ort.SessionOptions()
options.add_session_config_entry("onnxopt.cpu_kernels", "staged")
options.register_custom_ops_library(sys.argv[1])
proto = sys.argv[2]
x = np.ones((2, 64), np.float32)
print(ort.InferenceSession(proto, options, providers=["CPUExecutionProvider"])
      .run(None, {"x": x})[0].sum())
"""


def test_a_process_that_used_the_gpu_exits_0(tmp_path):
    text = """<ir_version: 10, opset_import: ["": 21, "ai.onnxopt.cuda": 1]>
    g (float[2,64] x) => (float[2,64] y) { y = ai.onnxopt.cuda.RMSNorm (x) }"""
    proto = onnx.parser.parse_model(text)
    proto.ir_version = 10
    onnx.save(proto, tmp_path / "m.onnx")
    proc = subprocess.run([sys.executable, "-c", USES_THE_GPU, library.path(),
                           str(tmp_path / "m.onnx")], capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.strip()) == pytest.approx(128.0, rel=1e-3)
