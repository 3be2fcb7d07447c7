"""Without a terminal (a CI log, a pipe, a file) reports are plain lines: nothing folded at 80
columns, no box drawing, every name whole on its line, so grep finds it. On a terminal they
stay rich tables."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BOX_DRAWING = {chr(c) for c in range(0x2500, 0x2580)}


def _onnxopt(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "onnxopt", *args], env=env, timeout=300,
                          check=False, **kwargs)


def test_optimize_report_in_a_log_keeps_every_name_whole(tmp_path):
    report = tmp_path / "r.json"
    done = _onnxopt("optimize", str(ROOT / "models" / "llama.dynamo.onnx"), "-o",
                    str(tmp_path / "o.onnx"), "--target", "cpu", "--json", str(report),
                    capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not BOX_DRAWING & set(done.stdout)
    select = json.loads(report.read_text())["select"]["nodes"]
    names = {s["chosen"] for s in select} | {k for s in select for k in s["rejected"]}
    names |= {s["op"] for s in select}
    assert any(len(name) > 30 for name in names)  # long enough to have been folded at 80
    for name in names:
        assert any(name in line for line in lines), f"{name} is not whole on any line"
    kernels = lines.index("kernels")
    assert lines[kernels + 1].split() == ["fused", "op", "kernel", "nodes", "chosen", "by",
                                          "not", "chosen:", "why"]


def test_kernels_listing_in_a_log_is_one_line_per_kernel():
    from onnxopt.select.registry import default_registry

    done = _onnxopt("kernels", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not BOX_DRAWING & set(done.stdout)
    lines = done.stdout.splitlines()
    for kernel in default_registry():
        (line,) = [line for line in lines if f" {kernel.name} " in f" {line} "]
        assert kernel.backend in line.split()


def test_a_terminal_still_gets_rich_tables():
    primary, secondary = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen([sys.executable, "-m", "onnxopt", "kernels", "--op", "GeluFused"],
                             stdout=secondary, stderr=subprocess.DEVNULL, env=env)
    os.close(secondary)
    out = b""
    try:  # read while it prints, so a full terminal buffer never blocks it
        while chunk := os.read(primary, 65536):
            out += chunk
    except OSError:  # the child closed its end
        pass
    os.close(primary)
    assert child.wait(timeout=300) == 0
    assert BOX_DRAWING & set(out.decode())
