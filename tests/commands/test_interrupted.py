"""An interrupted command leaves nothing behind (issue 29): SIGTERM (a CI timeout, ``docker
stop``) or SIGINT at any point of a run ends it with one line, ``onnxopt: interrupted``, exit
143 or 130, and the output folder holds exactly what it held before. The console script runs
in a process of its own; the writer's test hook (``ONNXOPT_TEST_PAUSE_AT``,
:func:`onnxopt.exporter.save.pause_point`) stops it at a named point for the signal."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                **extra)


def _start(args, cwd, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "onnxopt", *map(str, args)], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=_env(**env))


def _everything(folder: Path) -> list[str]:
    """Every name under ``folder``, hidden ones and folders' contents too."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def inline_model(models_dir, tmp_path) -> Path:
    path = tmp_path / "m.onnx"
    shutil.copy(models_dir / "vit.ts.onnx", path)
    return path


@pytest.fixture
def external_model(models_dir, tmp_path) -> Path:
    """GPT-2 saved with every weight in a data file: the writer streams a data file too."""
    path = tmp_path / "ext.onnx"
    onnx.save_model(onnx.load(models_dir / "gpt2.ts.onnx"), path, save_as_external_data=True,
                    all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0)
    return path


def _paused_then_signalled(args, folder, point, number=signal.SIGTERM):
    proc = _start(args, folder, ONNXOPT_TEST_PAUSE_AT=point)
    try:
        line = proc.stderr.readline()
        assert line == f"onnxopt: paused at {point}\n", line + proc.stderr.read()
        proc.send_signal(number)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    return proc.returncode, err


@pytest.mark.parametrize("model, point, done", [
    ("inline_model", "staged", []), ("inline_model", "verify", []),
    ("inline_model", "small-file", ["o.onnx"]),  # the report's turn: the model is in place
    ("external_model", "data-file", []), ("external_model", "model-file", []),
    ("external_model", "verify", [])])
def test_sigterm_at_each_write_leaves_the_folder_as_it_was(request, tmp_path, model, point,
                                                           done):
    path = request.getfixturevalue(model)
    before = _everything(tmp_path)
    code, err = _paused_then_signalled(
        ["optimize", path, "-o", tmp_path / "o.onnx", "--verify", "--json", tmp_path / "r.json",
         "--target", "cpu", "-q"], tmp_path, point)
    assert (code, err) == (143, "onnxopt: interrupted\n")
    assert _everything(tmp_path) == sorted([*before, *done])


def test_ctrl_c_is_the_same_with_exit_130(inline_model, tmp_path):
    before = _everything(tmp_path)
    code, err = _paused_then_signalled(["optimize", inline_model, "-o", tmp_path / "o.onnx",
                                        "--target", "cpu", "-q"], tmp_path, "staged",
                                       signal.SIGINT)
    assert (code, err) == (130, "onnxopt: interrupted\n")
    assert _everything(tmp_path) == before


def test_run_writing_its_outputs_leaves_nothing(inline_model, tmp_path):
    before = _everything(tmp_path)
    code, err = _paused_then_signalled(["run", inline_model, "-o", tmp_path / "out.npz"],
                                       tmp_path, "small-file")
    assert (code, err) == (143, "onnxopt: interrupted\n")
    assert _everything(tmp_path) == before


@pytest.mark.parametrize("delay", [0.3, 0.9, 1.6, 2.5])
def test_sigterm_at_any_moment_leaves_the_folder_as_it_was_or_the_result(external_model,
                                                                        tmp_path, delay):
    """Without the hook, at moments spread over a run (where each lands depends on the
    machine): the run either ends interrupted with the folder as it was, or put its two
    files in place first (finished, or interrupted after that and before its exit; on a
    loaded machine the last moments of a run are long enough to be hit); never a temporary
    file, never one of the two files without the other."""
    before = _everything(tmp_path)
    proc = _start(["optimize", external_model, "-o", tmp_path / "o.onnx", "--verify",
                   "--target", "cpu", "-q"], tmp_path)
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    result = sorted([*before, "o.onnx", "o.onnx.data"])
    if proc.returncode == 0:
        assert _everything(tmp_path) == result
        return
    # Before the console script's handler is in place (the interpreter's own start),
    # SIGTERM ends the process as it always did: nothing was written by then.
    assert (proc.returncode, err) in ((143, "onnxopt: interrupted\n"), (-15, ""))
    assert _everything(tmp_path) in (before, result)
    if _everything(tmp_path) == result:  # what was put in place is the whole, verified result
        onnx.checker.check_model(str(tmp_path / "o.onnx"))


def test_ctrl_c_while_starting_is_one_line(tmp_path, inline_model):
    """Ctrl-C while the command line imports its modules used to print a traceback of 40
    lines: the signal is sent from inside the import of NumPy, the first the console script
    makes, so it lands there whatever the machine's speed."""
    script = ("import builtins, os, signal, sys\n"
              "real = builtins.__import__\n"
              "def importing(name, *args, **kwargs):\n"
              "    if name == 'numpy':\n"
              "        builtins.__import__ = real\n"
              "        os.kill(os.getpid(), signal.SIGINT)\n"
              "    return real(name, *args, **kwargs)\n"
              "from onnxopt.cli import run\n"
              "builtins.__import__ = importing\n"
              "sys.argv = ['onnxopt', 'optimize', sys.argv[1]]\n"
              "run()\n")
    done = subprocess.run([sys.executable, "-c", script, str(inline_model)], cwd=tmp_path,
                          capture_output=True, text=True, env=_env(), timeout=120, check=False)
    assert (done.returncode, done.stderr) == (130, "onnxopt: interrupted\n")


def test_a_reader_that_stops_early_is_not_an_error(models_dir, tmp_path):
    """``onnxopt ir m | head -1`` used to exit 1 (BrokenPipeError)."""
    proc = subprocess.Popen([sys.executable, "-m", "onnxopt", "ir", models_dir / "gpt2.ts.onnx"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
                            cwd=tmp_path)
    assert proc.stdout.readline().startswith(b"# ir_version")
    proc.stdout.close()
    err = proc.stderr.read()
    assert (proc.wait(timeout=120), err) == (0, b"")


def test_an_error_that_follows_a_signal_is_the_interruption(cli, monkeypatch, tmp_path):
    """An ORT custom op's callback turns any exception, the interruption too, into ORT's error
    status, which comes back as another error: once the handler has raised, the command was
    interrupted, whatever error ends it."""
    from onnxopt import cli as command_line
    from onnxopt.errors import Interrupted

    monkeypatch.setattr(command_line, "_SIGNALLED", [Interrupted(signal.SIGTERM, "SIGTERM")])
    assert cli("run", tmp_path / "missing.onnx") == (143, "", "onnxopt: interrupted\n")
    monkeypatch.setattr(command_line, "_SIGNALLED", [])
    assert cli("run", tmp_path / "missing.onnx")[0] == 2
