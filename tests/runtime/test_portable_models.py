"""A model optimized with ``--target cuda`` here carries no device-specific choice and runs on a
machine that has neither nvcc nor PyCUDA (its ai.onnxopt.cuda ops as their CPU references)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.runtime.cuda import DOMAIN, metadata
from onnxopt.runtime.ops.examples import attention_feeds, attention_model

# What a node may say: the model's facts. Entry points, tiles, warps, vector widths are chosen
# when the kernel loads, from the device.
ALLOWED = {op: set(spec["attrs"]) for family in metadata.FAMILIES
           for op, spec in metadata.ops(family).items()}


def test_nodes_carry_no_device_specific_choice(models_dir):
    for model in (attention_model(head_size=80), attention_model(head_size=256, causal=False),
                  onnx.load(str(models_dir / "llama.dynamo.onnx"))):
        proto = run_pipeline(model, OptimizeOptions(target="cuda")).proto
        ours = [n for n in proto.graph.node if n.domain == DOMAIN]
        assert ours
        for node in ours:
            names = {a.name for a in node.attribute}
            assert names <= ALLOWED[node.op_type], (node.op_type, names)
            values = [helper.get_attribute_value(a) for a in node.attribute]
            assert not any(isinstance(v, bytes) and (b"_bm" in v or b"_v8" in v) for v in values)


RUN_WITHOUT_TOOLKIT = """
import sys
sys.modules["pycuda"] = None  # as if PyCUDA were not installed: importing it fails
sys.modules["pycuda.driver"] = None
sys.modules["pycuda.compiler"] = None
import subprocess
from onnxopt.runtime.cuda import compiler
compiler.find_nvcc = lambda: None  # as if no toolkit were installed
real_run = subprocess.run
def no_nvcc(cmd, *args, **kwargs):
    assert "nvcc" not in str(cmd[0]), f"nvcc was run: {cmd}"
    return real_run(cmd, *args, **kwargs)
subprocess.run = no_nvcc
from onnxopt.cli import main
sys.exit(main(["run", sys.argv[1], "--inputs", sys.argv[2], "--provider", "cpu",
               "-o", sys.argv[3]]))
"""


def test_runs_where_there_is_neither_nvcc_nor_pycuda(tmp_path):
    model = attention_model(head_size=96)
    proto = run_pipeline(model, OptimizeOptions(target="cuda")).proto
    assert any(n.domain == DOMAIN for n in proto.graph.node)
    onnx.save(proto, tmp_path / "m.onnx")
    feeds = attention_feeds(model, 2, 21, pad=(0, 5))
    np.savez(tmp_path / "in.npz", **feeds)
    env = {k: v for k, v in os.environ.items()
           if k not in ("ONNXOPT_NVCC", "CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = os.path.dirname(sys.executable)  # no nvcc on it
    env["ONNXOPT_LIBCUDA"] = "/nonexistent/libcuda.so"
    proc = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_TOOLKIT, str(tmp_path / "m.onnx"),
         str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    import onnxruntime as ort

    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, feeds)
    got = np.load(tmp_path / "out.npz")["o"]
    err = np.abs(got.astype(np.float64) - want).max() / np.abs(want.astype(np.float64)).max()
    assert err < 2e-3
