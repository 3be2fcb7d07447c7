"""A write the system refuses leaves nothing behind (issue 29). A file-size limit
(RLIMIT_FSIZE) makes the kernel fail the writes past it, as a full disk fails them (EFBIG
here, ENOSPC there), for root as for anyone: the command says so in one line, exit 2, and
the folder holds what it held before, with no temporary file of the model or its data."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 64 * 1024  # bytes: far below either model's output


def _limited():
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


@pytest.mark.parametrize("layout", ["inline", "external data"])
def test_a_write_refused_by_the_system_leaves_nothing(models_dir, tmp_path, layout):
    model = tmp_path / "m.onnx"
    if layout == "inline":
        shutil.copy(models_dir / "vit.ts.onnx", model)
    else:
        onnx.save_model(onnx.load(models_dir / "gpt2.ts.onnx"), model, save_as_external_data=True,
                        all_tensors_to_one_file=True, location="m.onnx.data", size_threshold=0)
    before = sorted(p.name for p in tmp_path.iterdir())
    done = subprocess.run(
        [sys.executable, "-m", "onnxopt", "optimize", str(model), "-o", str(tmp_path / "o.onnx"),
         "--target", "cpu", "-q"], capture_output=True, text=True, timeout=300, check=False,
        cwd=tmp_path, preexec_fn=_limited,
        env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"onnxopt: error: {tmp_path / 'o.onnx'}: cannot write output: "
                           "File too large\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
