"""A broken ONNX Runtime install is named, with the fix (issue 29): where ``import
onnxruntime`` gives a module without ``__version__`` (onnxruntime and onnxruntime-gpu both
installed, then one uninstalled: they share the folder), every command that loads it said
``internal error: module 'onnxruntime' has no attribute '__version__'`` (exit 3). A fake
package of that shape is put first on the path of a process of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def broken_path(tmp_path) -> str:
    package = tmp_path / "site" / "onnxruntime"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("# what an uninstall of the other package left\n")
    return os.pathsep.join([str(package.parent), str(ROOT), os.environ.get("PYTHONPATH", "")])


@pytest.mark.parametrize("command", ["optimize", "explain", "verify", "run"])
def test_each_command_that_loads_it_says_what_is_wrong(models_dir, tmp_path, broken_path,
                                                       command):
    work = tmp_path / "work"
    work.mkdir()
    model = work / "m.onnx"
    shutil.copy(models_dir / "vit.ts.onnx", model)
    args = {"optimize": ["optimize", model, "-o", work / "o.onnx"],
            "explain": ["explain", model], "verify": ["verify", model, model],
            "run": ["run", model, "-o", work / "out.npz"]}[command]
    done = subprocess.run([sys.executable, "-m", "onnxopt", *map(str, args)], cwd=work,
                          capture_output=True, text=True, timeout=300, check=False,
                          env=dict(os.environ, PYTHONPATH=broken_path))
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("onnxopt: error: ONNX Runtime is not installed whole: ")
    assert "has no __version__" in done.stderr
    assert "pip install --force-reinstall onnxruntime-gpu" in done.stderr
    assert sorted(p.name for p in work.iterdir()) == ["m.onnx"]


def test_the_whole_install_has_no_problem():
    from onnxopt import ort_facts

    assert ort_facts.runtime_problem() is None
