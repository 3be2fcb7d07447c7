"""What the console script (``cli.run``) does to its own process: it ends without the
interpreter's teardown (``cli.exit_without_teardown``) — nothing a normal exit does for the
user may be lost with it: buffered output, exit handlers, a thread still at work, the exit
code — and it lets the garbage collector run less often (``cli.fewer_collections``). A
caller of ``cli.main`` gets neither."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "gpt2.ts.onnx"


_OPTIMIZE_ARGV_MODEL_OUTPUT = (
    "import sys\nfrom onnxopt.cli import run\n"
    "sys.argv = ['onnxopt', 'optimize', sys.argv[1], '-o', sys.argv[2], '--target', 'cpu']\n"
    "run()\n")


def _python(code: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTHONUNBUFFERED", None)  # buffered streams, as a user's shell has them
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300, check=False)


def test_piped_output_is_complete_and_exit_handlers_run(tmp_path, cli):
    """``onnxopt ir`` prints the whole IR into a pipe, more than Python's buffer for it holds;
    every byte arrives, and a handler registered with ``atexit`` still runs after it (what it
    writes unflushed is flushed too)."""
    code, expected, _ = cli("ir", MODEL)
    assert code == 0 and len(expected) > 8 * io.DEFAULT_BUFFER_SIZE
    done = _python(
        "import atexit, sys\n"
        "from onnxopt.cli import run\n"
        "atexit.register(lambda: sys.stdout.write('|handler ran'))\n"
        "sys.argv = ['onnxopt', 'ir', sys.argv[1]]\n"
        "run()\n"
        "print('not reached')\n", str(MODEL), tmp_path=tmp_path)
    assert done.returncode == 0
    assert done.stdout == expected + "|handler ran"
    assert done.stderr == ""


def test_exit_code_and_error_line_survive(tmp_path):
    done = _python("from onnxopt.cli import run\nimport sys\n"
                   "sys.argv = ['onnxopt', 'optimize', 'missing.onnx']\nrun()\n",
                   tmp_path=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "onnxopt: error: missing.onnx: no such file\n"


def test_a_running_thread_is_waited_for(tmp_path):
    """With another (non-daemon) thread alive, the exit is Python's own, which waits for it."""
    marker = tmp_path / "thread-finished"
    done = _python(
        "import sys, threading, time\n"
        "from onnxopt.cli import run\n"
        "marker = sys.argv[1]\n"
        "def late():\n"
        "    time.sleep(0.5)\n"
        "    open(marker, 'w').close()\n"
        "threading.Thread(target=late).start()\n"
        "sys.argv = ['onnxopt', '--version']\n"
        "run()\n", str(marker), tmp_path=tmp_path)
    assert done.returncode == 0
    assert done.stdout.startswith("onnxopt, version")
    assert marker.exists()


def test_optimize_through_a_pipe_writes_its_file_and_report(tmp_path):
    out = tmp_path / "o.onnx"
    done = _python(_OPTIMIZE_ARGV_MODEL_OUTPUT, str(MODEL), str(out), tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("nodes by op")
    assert done.stdout.rstrip().endswith(f"wrote {out}")
    assert out.stat().st_size > 0 and not [p for p in tmp_path.iterdir() if p.name != "o.onnx"]


def test_the_collector_threshold_is_the_console_scripts_alone(tmp_path):
    import gc

    from onnxopt.cli import main

    done = _python("import atexit, gc, sys\n"
                   "from onnxopt.cli import run\n"
                   "atexit.register(lambda: print(gc.get_threshold()[0]))\n"
                   "sys.argv = ['onnxopt', '--version']\n"
                   "run()\n", tmp_path=tmp_path)
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1] == "10000"
    before = gc.get_threshold()
    assert main(["--version"]) == 0
    assert gc.get_threshold() == before


def test_closed_or_dropped_stdout_exits_quietly(tmp_path):
    """With descriptor 1 closed (``>&-``), or ``sys.stdout`` dropped to None as a printer
    does after a broken pipe, the command still exits with its code and no traceback."""
    closed = subprocess.run(
        [sys.executable, "-c", _OPTIMIZE_ARGV_MODEL_OUTPUT, str(MODEL), str(tmp_path / "o.onnx")],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300, check=False,
        env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")),
        preexec_fn=lambda: os.close(1))
    assert (closed.returncode, closed.stderr) == (0, "")
    assert (tmp_path / "o.onnx").stat().st_size > 0
    dropped = _python("import sys\nfrom onnxopt.cli import run\n"
                      "sys.argv = ['onnxopt', '--version']\n"
                      "import atexit\natexit.register(lambda: setattr(sys, 'stdout', None))\n"
                      "run()\n", tmp_path=tmp_path)
    assert dropped.returncode == 0
    assert dropped.stderr == ""


def test_main_without_argv_still_raises_system_exit(tmp_path):
    """A program calling ``main()`` can catch its exit, and keeps its collector settings."""
    done = _python("import gc, sys\nfrom onnxopt.cli import main\n"
                   "sys.argv = ['onnxopt', 'optimize', 'missing.onnx']\n"
                   "before = gc.get_threshold()\n"
                   "try:\n    main()\nexcept SystemExit as e:\n"
                   "    print('caught', e.code, gc.get_threshold() == before)\n",
                   tmp_path=tmp_path)
    assert done.returncode == 0
    assert done.stdout == "caught 2 True\n"


def test_the_ort_helper_is_started_early_for_the_commands_it_serves(tmp_path):
    """``run`` forks the ORT helper before importing the stages for optimize, explain and
    verify (not for help, nor for commands that never ask ORT through it)."""
    from onnxopt.cli import _asks_ort

    assert _asks_ort(["optimize", "m.onnx", "-o", "out.onnx"])
    assert _asks_ort(["explain", "m.onnx"]) and _asks_ort(["verify", "a.onnx", "b.onnx"])
    assert not _asks_ort(["optimize", "--help"]) and not _asks_ort(["verify", "-h"])
    assert not _asks_ort(["kernels"]) and not _asks_ort(["ir", "m.onnx"]) and not _asks_ort([])
    done = _python(
        "import sys\nfrom onnxopt import ort_helper\nfrom onnxopt import cli\n"
        "cli._command = lambda args: print(ort_helper._helper is not None"
        " and 'onnxopt.pipeline' not in sys.modules) or 0\n"
        "sys.argv = ['onnxopt', 'optimize', 'm.onnx']\ncli.run()\n", tmp_path=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
