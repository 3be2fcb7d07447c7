"""libonnxopt_ops' CUDA path on a machine without a GPU, through a fake driver (fake_cuda.c).

The fake driver keeps "device" memory on the host and runs each launch with the library's own
host implementation, so a session whose CPU ops stage through the GPU computes real answers
here: the driver is opened and initialised, the primary context retained, pushed and popped,
the image chosen for the device's compute capability and checked against its manifest, the
module loaded, the function looked up, large shared memory opted into, the arguments packed
and the grid chosen from the device's limits. Each case runs in a process of its own (the
library opens the driver once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.runtime import library
from onnxopt.runtime.cuda import compiler, metadata
from onnxopt.runtime.ops.examples import attention_feeds, attention_model
from onnxopt.verification.inputs import make_inputs

HERE = Path(__file__).parent

RUN = r"""
import json, sys
import numpy as np, onnxruntime as ort
lib, model, feeds_path, mode = sys.argv[1:5]
feeds = dict(np.load(feeds_path))
def run(cpu_kernels):
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.add_session_config_entry("onnxopt.cpu_kernels", cpu_kernels)
    options.register_custom_ops_library(lib)
    sess = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
try:
    staged = run(mode)
except Exception as error:
    print(json.dumps({"error": str(error)}))
    sys.exit(0)
host = run("host")
print(json.dumps({"equal": all(np.array_equal(a, b) for a, b in zip(staged, host)),
                  "finite": all(np.isfinite(a.astype(np.float32)).all() for a in staged)}))
"""


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fake_cuda")
    out = folder / "libcuda.so.1"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", str(HERE / "fake_cuda.c"), "-o", str(out),
                    "-ldl"], check=True, capture_output=True)
    return out


def write_images(folder: Path, targets=("sm_80", "sm_86", "sm_90", "compute_90"), *,
                 digest: str | None = None) -> Path:
    """Fake images (their text names them) and a manifest as build_images writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"families": {}}
    for family in metadata.FAMILIES:
        entry = manifest["families"][family] = {
            "source_digest": digest or compiler.source_digest(metadata.source_path(family)),
            "targets": {}}
        for target in targets:
            name = compiler.image_name(family, target)
            (folder / name).write_text(f"FAKE {target} {family}")
            entry["targets"][target] = {"file": name}
    (folder / compiler.MANIFEST).write_text(json.dumps(manifest))
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory, models_dir) -> list[tuple[Path, Path]]:
    """(optimized model, feeds) for every op: attention in float16 with padding (head 64 and
    256: the latter's tile opts into more than 48 KiB of shared memory), LLaMA in float32
    (RMSNorm with residual, SwiGLU, attention), GPT-2 (LayerNorm, BiasGelu), a UNet block
    (GroupNorm + SiLU)."""
    folder = tmp_path_factory.mktemp("models")
    cases = []
    attention = [(attention_model(), 37), (attention_model(head_size=256, kv_heads=8), 20)]
    for i, (model, seq) in enumerate(attention):
        cases.append((f"attention{i}", model, attention_feeds(model, 2, seq, pad=(0, 5))))
    for name, dims in (("llama.dynamo", {"batch": 2, "other": 9}),
                       ("gpt2.ts", {"batch": 2, "other": 9}), ("diffusion.ts", {"batch": 1})):
        model = onnx.load(str(models_dir / f"{name}.onnx"))
        cases.append((name, model, make_inputs(model, dims, seed=0)))
    out = []
    for name, model, feeds in cases:
        proto = run_pipeline(model, OptimizeOptions(target="cuda")).proto
        assert any(n.domain == "ai.onnxopt.cuda" for n in proto.graph.node), name
        onnx.save(proto, folder / f"{name}.onnx")
        np.savez(folder / f"{name}.npz", **feeds)
        out.append((folder / f"{name}.onnx", folder / f"{name}.npz"))
    return out


def staged(fake_driver: Path, images: Path, model: Path, feeds: Path, log: Path, *,
           cc: int = 86, mode: str = "staged", libcuda: str | None = None) -> dict:
    env = {**os.environ, "ONNXOPT_LIBCUDA": libcuda or str(fake_driver),
           "ONNXOPT_KERNEL_IMAGES": str(images), "FAKE_CUDA_CC": str(cc),
           "FAKE_CUDA_LOG": str(log), "FAKE_CUDA_OPS": library.path()}
    proc = subprocess.run([sys.executable, "-c", RUN, library.path(), str(model), str(feeds),
                           mode], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_op_through_the_driver_path_computes_the_host_answer(fake_driver, models,
                                                                    tmp_path):
    images = write_images(tmp_path / "images")
    for model, feeds in models:
        log = tmp_path / f"{model.stem}.log"
        assert staged(fake_driver, images, model, feeds, log) == {"equal": True,
                                                                   "finite": True}
        lines = log.read_text().splitlines()
        launches = [line for line in lines if line.startswith("launch ")]
        ours = sum(n.domain == "ai.onnxopt.cuda" for n in onnx.load(str(model)).graph.node)
        assert len(launches) == ours, model.stem  # one run staged (the other on the host)
        # every call pushes the primary context (retained once) and pops it again
        assert lines.count("push") == lines.count("pop") == ours
        assert lines.count("retain 0") == 1
        assert all(line.startswith("module FAKE sm_86 ") for line in lines
                   if line.startswith("module "))


def test_the_tile_and_the_grid_come_from_the_device(fake_driver, models, tmp_path):
    images = write_images(tmp_path / "images")
    (big, feeds) = models[1]  # float16 attention, head 256
    log = tmp_path / "big.log"
    staged(fake_driver, images, big, feeds, log)
    lines = log.read_text().splitlines()
    # 99 KiB of opt-in shared memory: the 128-row tile (132 KiB) does not fit, the 64-row does
    # and is opted into above the default 48 KiB
    assert "smem fa_tc_f16_d256_bm64_bn32 101376" in lines
    launch = next(line for line in lines if line.startswith("launch "))
    assert launch.startswith("launch fa_tc_f16_d256_bm64_bn32 grid=1,8,2 block=128,1,1 "
                             "smem=101376 stream=(nil)")
    log = tmp_path / "hopper.log"
    staged(fake_driver, images, big, feeds, log, cc=90)
    env_lines = log.read_text().splitlines()
    assert any(line.startswith("launch fa_tc_f16_d256_bm64_bn32") for line in env_lines)
    (gpt2, gpt2_feeds) = models[3]
    log = tmp_path / "gpt2.log"
    staged(fake_driver, images, gpt2, gpt2_feeds, log)
    gelu = next(line for line in log.read_text().splitlines()
                if line.startswith("launch gelu_f32_v4 "))
    assert " block=256,1,1 " in gelu


@pytest.mark.parametrize("cc, targets, image", [
    (87, ("sm_80", "sm_86", "compute_90"), "sm_86"),  # the nearest lower minor of its major
    (89, ("sm_80", "sm_86", "sm_89", "sm_90", "compute_90"), "sm_89"),
    (120, ("sm_80", "sm_90", "compute_90"), "compute_90"),  # a newer major JIT-compiles PTX
])
def test_the_image_for_the_compute_capability(fake_driver, models, tmp_path, cc, targets,
                                              image):
    images = write_images(tmp_path / "images", targets)
    model, feeds = models[2]
    log = tmp_path / "log"
    assert staged(fake_driver, images, model, feeds, log, cc=cc)["equal"]
    modules = {line.split()[2] for line in log.read_text().splitlines()
               if line.startswith("module ")}
    assert modules == {image}


def test_failures_are_one_status_naming_the_op(fake_driver, models, tmp_path):
    model, feeds = models[2]  # LLaMA: its first op is an RMSNorm
    images = write_images(tmp_path / "images", ("sm_90",))
    error = staged(fake_driver, images, model, feeds, tmp_path / "a.log", cc=86)["error"]
    assert "ai.onnxopt.cuda::RMSNorm (float32, CPUExecutionProvider, staged through the GPU): " \
           "no kernel image of layer_norm for compute capability 8.6" in error
    stale = write_images(tmp_path / "stale", digest="0" * 64)
    error = staged(fake_driver, stale, model, feeds, tmp_path / "b.log", cc=90)["error"]
    assert "no kernel image of layer_norm for compute capability 9.0" in error
    error = staged(fake_driver, images, model, feeds, tmp_path / "c.log", cc=75)["error"]
    assert "ln_f32_v4 needs compute capability 8.0, the device has 7.5" in error
    error = staged(fake_driver, images, model, feeds, tmp_path / "d.log",
                   libcuda=str(tmp_path / "missing.so"))["error"]
    assert "RMSNorm (float32, CPUExecutionProvider, staged through the GPU): the CUDA driver " \
           f"library ({tmp_path / 'missing.so'}) cannot be loaded" in error
    error = staged(fake_driver, images, model, feeds, tmp_path / "e.log", mode="gpu")["error"]
    assert "session config onnxopt.cpu_kernels is 'gpu'; use 'host' or 'staged'" in error
