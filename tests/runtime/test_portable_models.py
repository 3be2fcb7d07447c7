"""A model optimized with ``--target cuda`` here carries no device-specific choice and runs on a
machine that has neither nvcc nor PyCUDA, and in a Python that cannot import onnxopt at all:
plain ONNX Runtime with libonnxopt_ops registered (its ai.onnxopt.cuda ops on the host)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper

from onnxopt.evaluation.sizes import padding_mask
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


WITHOUT_ONNXOPT = r"""
import sys
sys.modules["onnxopt"] = None  # importing onnxopt fails here
import json
import numpy as np
import onnxruntime as ort
try:
    import onnxopt  # noqa: F401
    raise SystemExit("onnxopt is importable")
except ImportError:
    pass
library, folder = sys.argv[1], sys.argv[2]
report = {}
for name in json.load(open(f"{folder}/names.json")):
    feeds = dict(np.load(f"{folder}/{name}.npz"))
    want = ort.InferenceSession(f"{folder}/{name}.onnx",
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    options = ort.SessionOptions()
    options.register_custom_ops_library(library)
    got = ort.InferenceSession(f"{folder}/{name}.opt.onnx", options,
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    errors = []
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        errors.append(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)) if w.size else 0.0)
    report[name] = max(errors)
print(json.dumps(report))
"""


def test_every_cuda_output_of_models_runs_in_plain_ort_without_onnxopt(models_dir, tmp_path):
    """What a user without onnxopt does: copy libonnxopt_ops anywhere, register it on a plain
    SessionOptions, run the --target cuda output on the CPU provider. Every model of models/
    computes the original function (float32, relative error below 1e-4)."""
    from onnxopt.runtime import library
    from onnxopt.verification.inputs import make_inputs

    names = []
    for path in sorted(models_dir.glob("*.onnx")):
        name = path.name.removesuffix(".onnx")
        proto = run_pipeline(str(path), OptimizeOptions(target="cuda")).proto
        assert any(n.domain == DOMAIN for n in proto.graph.node), name
        onnx.save(proto, tmp_path / f"{name}.opt.onnx")
        shutil.copy(path, tmp_path / f"{name}.onnx")
        original = onnx.load(str(path))
        try:
            # (speech encoders: 400 audio samples, 39 frames after their conv front end)
            feeds = make_inputs(original, {"batch": 2, "other": 13}, seed=0,
                                overrides={"samples": 400})
        except ValueError:  # an image model: its sides from the model's own hints
            feeds = make_inputs(original, {"batch": 2}, seed=0)
        if "attention_mask" in feeds:
            # Right padding only: where a query sees no key our attention kernel gives 0, and
            # the report says so (test_the_report_names_what_flash_attention_assumes).
            feeds["attention_mask"] = padding_mask(feeds["attention_mask"].shape)
        np.savez(tmp_path / f"{name}.npz", **feeds)
        names.append(name)
    (tmp_path / "names.json").write_text(json.dumps(names))
    copied = tmp_path / "lib" / "libonnxopt_ops.so"
    copied.parent.mkdir()
    shutil.copy(library.path(), copied)
    proc = subprocess.run([sys.executable, "-I", "-c", WITHOUT_ONNXOPT, str(copied),
                           str(tmp_path)], capture_output=True, text=True, timeout=600,
                          check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    errors = json.loads(proc.stdout)
    assert sorted(errors) == names and len(names) == 43
    assert {name: e for name, e in errors.items() if not e < 1e-4} == {}


def test_the_report_names_what_flash_attention_assumes(models_dir):
    """Issue 28: a kernel exact only where every query sees a key says so where it is chosen:
    in the selection report (and its JSON), and not where it is not."""
    cuda = run_pipeline(str(models_dir / "llama.dynamo.onnx"), OptimizeOptions(target="cuda"))
    assumptions = cuda.report.stages["select"].to_json()["assumptions"]
    assert list(assumptions) == ["pycuda.flash_attention_f32"]
    assert "sees no key" in assumptions["pycuda.flash_attention_f32"]
    cpu = run_pipeline(str(models_dir / "llama.dynamo.onnx"), OptimizeOptions(target="cpu"))
    assert "assumptions" not in cpu.report.stages["select"].to_json()
