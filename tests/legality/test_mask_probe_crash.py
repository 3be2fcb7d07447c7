"""A mask probe that crashes ONNX Runtime: the probe runs in the ORT helper itself, so the
crash takes the helper down; the probe runs again in a child of onnxopt's own, whose death
is the reason the mask is not classified, and the run goes on with its later calls in such
children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def crashing_probe(*_args):
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_crashing_probe_is_a_reason_and_the_run_goes_on(tmp_path):
    code = textwrap.dedent(f"""
        from onnxopt import ort_helper
        from onnxopt.legality import mask
        from onnxopt.rules import attention
        from tests.legality.test_mask_probe_crash import crashing_probe

        mask._probe = crashing_probe  # before the helper is forked: it has the same module
        reasons = []
        classify = attention.classify_mask

        def recording(*args):
            info = classify(*args)
            reasons.append(info.reason)
            return info

        attention.classify_mask = recording
        ort_helper.start()
        from onnxopt.cli import main
        code = main(["optimize", {str(ROOT / "models" / "gpt2.dynamo.onnx")!r}, "-o",
                     {str(tmp_path / "out.onnx")!r}, "--target", "cpu", "-q"])
        print(code, not ort_helper._helper.alive, sorted({{str(r) for r in reasons}}),
              sorted({{getattr(r, "code", None) for r in reasons}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "0 True ['ONNX Runtime the native code crashed (signal SIGSEGV)'] "
        "['mask_probe_crashed']"), out.stdout
    assert (tmp_path / "out.onnx").exists()
