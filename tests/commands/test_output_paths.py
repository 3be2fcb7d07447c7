"""Every output path is checked before any work (issue 29): an output that is the input or
another output, by identity; an existing device, FIFO, socket or folder; a folder that is
missing or cannot be written. Each is a usage error (exit 2) that writes nothing; ``--json -``
is the standard output."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat

import pytest


@pytest.fixture
def victim(models_dir, tmp_path):
    path = tmp_path / "victim.onnx"
    shutil.copy(models_dir / "vit.ts.onnx", path)
    return path


def _listing(folder):
    """Every entry of ``folder`` (hidden ones too) with its kind and size."""
    return sorted((p.name, stat.S_IFMT(p.lstat().st_mode), p.lstat().st_size)
                  for p in folder.iterdir())


def _refused(cli, folder, *args, says):
    before = _listing(folder)
    code, out, err = cli(*args)
    assert (code, out) == (2, ""), err
    assert "Traceback" not in err
    # One line of ours, or click's own usage error (its checks of a path's kind come first).
    assert (err.startswith("onnxopt: error: ") and err.count("\n") == 1) or (
        err.startswith("Usage: onnxopt")), err
    assert says in err
    assert _listing(folder) == before
    return err


def test_json_equal_to_the_input_is_refused_and_the_input_kept(cli, victim, tmp_path, file_hash):
    """``--json victim.onnx`` used to replace the input with the JSON report."""
    digest = file_hash(victim)
    _refused(cli, tmp_path, "optimize", victim, "-o", tmp_path / "victim.opt.onnx",
             "--json", victim, says="--json path is the input file; refusing to overwrite it")
    assert file_hash(victim) == digest


@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink", "hardlink"])
def test_json_equal_to_the_output_is_refused(cli, victim, tmp_path, spelling):
    out = tmp_path / "victim.opt.onnx"
    if spelling in ("symlink", "hardlink"):
        out.write_bytes(b"an earlier result")
        other = tmp_path / "report.json"
        (os.symlink if spelling == "symlink" else os.link)(out, other)
    else:
        other = out if spelling == "same" else tmp_path / "." / "victim.opt.onnx"
    _refused(cli, tmp_path, "optimize", victim, "-o", out, "--json", other,
             says="--json names the same file as -o")


def test_json_equal_to_an_input_set_is_refused(cli, victim, tmp_path):
    import numpy as np

    np.savez(tmp_path / "in.npz", pixel_values=np.zeros((1, 3, 32, 32), np.float32))
    _refused(cli, tmp_path, "optimize", victim, "--verify", "--inputs", tmp_path / "in.npz",
             "--json", tmp_path / "in.npz", says="--json path is the --inputs file")


def _fifo(path):
    os.mkfifo(path)


def _socket(path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock


def _device(path):
    """A private character device like /dev/null (1, 3): the test never names the real one,
    which a regression would replace with a regular file for every process on the machine."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("cannot make a device node here (not root, or no CAP_MKNOD)")


@pytest.mark.parametrize("kind, says", [(_fifo, "is a FIFO"), (_socket, "is a socket"),
                                        (_device, "is a character device"),
                                        (os.mkdir, "is a directory")],
                         ids=["fifo", "socket", "device", "directory"])
@pytest.mark.parametrize("option", ["-o", "--json"])
def test_an_existing_special_output_is_refused_untouched(cli, victim, tmp_path, kind, says,
                                                         option):
    special = tmp_path / "special"
    keep = kind(special)
    args = ["-o", special] if option == "-o" else ["-o", tmp_path / "o.onnx", "--json", special]
    try:
        _refused(cli, tmp_path, "optimize", victim, *args, says=says)
    finally:
        if keep is not None:
            keep.close()


def test_run_refuses_a_special_output_and_its_input(cli, victim, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    _refused(cli, tmp_path, "run", victim, "-o", tmp_path / "fifo", says="is a FIFO")
    _refused(cli, tmp_path, "run", victim, "-o", victim, says="output path is the input file")


@pytest.mark.parametrize("where", ["missing folder", "under a regular file", "/proc/self"])
@pytest.mark.parametrize("option", ["--json", "-o", "--tune-cache"])
def test_an_output_folder_that_cannot_take_it_is_refused_before_any_work(cli, victim, tmp_path,
                                                                         where, option):
    """Checked before the model is optimized, so nothing at all is written (``--json`` used to
    end in an internal error after the model was written). The folders are ones root cannot
    write either: one that does not exist, a path under a regular file (ENOTDIR for root as
    for anyone), and /proc/self, which refuses new files to root too."""
    if where == "/proc/self" and not os.path.isdir("/proc/self"):
        pytest.skip("needs /proc")
    (tmp_path / "plain").write_text("a regular file")
    path = {"missing folder": tmp_path / "nowhere" / "x",
            "under a regular file": tmp_path / "plain" / "x",
            "/proc/self": "/proc/self/onnxopt-test-x"}[where]
    args = {"--json": ["-o", tmp_path / "o.onnx", "--json", path], "-o": ["-o", path],
            "--tune-cache": ["-o", tmp_path / "o.onnx", "--tune", "--tune-cache", path]}[option]
    says = {"missing folder": "does not exist", "under a regular file": "is not a folder",
            "/proc/self": "output folder is not writable"}[where]
    _refused(cli, tmp_path, "optimize", victim, *args, says=says)
    assert not os.path.exists(path)


@pytest.mark.parametrize("where", ["missing folder", "under a regular file"])
def test_run_and_explain_check_their_outputs_first(cli, victim, tmp_path, where):
    (tmp_path / "plain").write_text("a regular file")
    folder = tmp_path / ("nowhere" if where == "missing folder" else "plain")
    _refused(cli, tmp_path, "run", victim, "-o", folder / "out.npz", says=str(folder))
    _refused(cli, tmp_path, "explain", victim, "--json", folder / "e.json", says=str(folder))
    _refused(cli, tmp_path, "explain", victim, "--json", victim, says="is the input file")


def test_json_to_stdout_leaves_stdout_to_the_json(cli, victim, tmp_path):
    """``--json -`` used to write a file named ``-``; the human report goes to stderr."""
    code, out, err = cli("optimize", victim, "-o", tmp_path / "o.onnx", "--json", "-")
    assert code == 0, err
    data = json.loads(out)
    assert data["output"] == str(tmp_path / "o.onnx") and data["written"] is True
    assert "nodes by op" in err and f"wrote {tmp_path / 'o.onnx'}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx", "victim.onnx"]


def test_explain_json_to_stdout(cli, victim, tmp_path):
    code, out, err = cli("explain", victim, "--json", "-")
    assert code == 0, err
    assert json.loads(out)["fusion"]["summary"]
    assert "fused" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.onnx"]


def test_run_writes_its_outputs_under_the_name_given(cli, victim, tmp_path):
    """np.savez given a name adds .npz to one without it: ``wrote out`` named another file."""
    import numpy as np

    code, out, err = cli("run", victim, "-o", tmp_path / "out")
    assert code == 0, err
    assert out.rstrip().endswith(f"wrote {tmp_path / 'out'}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "victim.onnx"]
    with np.load(tmp_path / "out") as data:
        assert data["last_hidden_state"].shape == (1, 17, 64)
