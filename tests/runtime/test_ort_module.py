"""ONNX Runtime's module is loaded when first used (onnxopt.runtime.ort_module): not when the
command line starts, and not by a run of the pipeline, whose questions of ORT the ORT helper
answers (onnxopt.ort_helper); a session made in the process loads it there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "gpt2.ts.onnx"

_REPORT = "print(json.dumps('onnxruntime.capi' in sys.modules))"


def _loaded_after(code: str) -> bool:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", f"import json, sys\n{code}\n{_REPORT}"],
                          capture_output=True, text=True, env=env, timeout=300, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_the_command_line_starts_without_loading_it():
    assert not _loaded_after("import onnxopt.cli as cli\ncli._register_commands()\n"
                             "import onnxopt.commands.optimize_cmd, onnxopt.pipeline, "
                             "onnxopt.safeguard, onnxopt.evaluation, onnxopt.select")


def test_a_run_leaves_it_to_the_helper_and_sessions_here_load_it():
    assert not _loaded_after("from onnxopt.pipeline import run_pipeline\n"
                             "from onnxopt.options import OptimizeOptions\n"
                             f"run_pipeline({str(MODEL)!r}, OptimizeOptions(target='cpu'))")
    assert _loaded_after(f"from onnxopt.evaluation import session\nsession({str(MODEL)!r})")


def test_the_lazy_module_is_the_real_module():
    import onnxruntime

    from onnxopt.runtime.ort_module import ort

    assert onnxruntime.InferenceSession is ort.InferenceSession
    assert ort.__version__ == onnxruntime.__version__
