"""``onnxopt verify`` on the command line: --save-inputs, --atol, tolerances and --inputs files
that are usage errors, the --json path checked before any work, JSON written even when
verification cannot run (and to stdout with ``-``), and --shape pinning every input."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

MODEL = """
agraph (float[batch, seq] x, int64[batch, seq] file) => (float[batch, seq] y)
    <float[1] w = {1.0}> {
  f = Cast <to = 1> (file)
  s = Add (x, f)
  y = Mul (s, w)
}
"""


@pytest.fixture
def models(make_model, tmp_path):
    """Two equal models, a third whose output is off by 1e-3 (its weight 1.001 on outputs near
    1), all on disk."""
    a, b, off = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "off.onnx"
    onnx.save_model(make_model(MODEL), a)
    onnx.save_model(make_model(MODEL), b)
    changed = make_model(MODEL)
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(
        np.array([1.001], np.float32), "w"))
    onnx.save_model(changed, off)
    return a, b, off


def test_save_inputs_writes_each_run_and_inputs_reads_them_back(models, tmp_path, cli):
    a, b, _ = models
    rc, _, err = cli("verify", a, b, "--save-inputs", tmp_path / "saved", "--json",
                     tmp_path / "r.json")
    assert (rc, err) == (0, "")
    data = json.loads((tmp_path / "r.json").read_text())
    files = [str(tmp_path / "saved" / f"run{k}.npz") for k in (1, 2, 3)]
    assert data["saved_inputs"] == files
    with np.load(files[1]) as run:  # an input named "file" too, which np.savez cannot write
        assert sorted(run.files) == ["file", "x"] and run["x"].shape == (2, 16)
    rc, _, err = cli("verify", a, b, *[arg for f in files for arg in ("--inputs", f)],
                     "--json", tmp_path / "again.json")
    assert (rc, err) == (0, "")
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["runs"] == data["runs"] and again["inputs"] == files


def test_atol_adds_to_rtol(models, cli):
    a, _, off = models
    assert cli("verify", a, off)[0] == 1  # 1e-3 off on outputs of ~1-10: over 1e-4 relative
    assert cli("verify", a, off, "--rtol", "0", "--atol", "0.05")[0] == 0
    rc, _, err = cli("verify", a, off, "--rtol", "0", "--atol", "0.0001")
    assert (rc, err) == (1, "onnxopt: error: outputs differ beyond tolerance: y\n")


@pytest.mark.parametrize("option, value", [("--rtol", "-1"), ("--atol", "-0.5"),
                                           ("--rtol", "nan")])
def test_a_negative_tolerance_is_a_usage_error(models, tmp_path, cli, option, value):
    a, b, _ = models
    rc, out, err = cli("verify", a, b, option, value, "--json", tmp_path / "r.json")
    assert rc == 2 and out == ""
    assert err == f"onnxopt: error: {option} {float(value):g}: a tolerance is a number >= 0\n"
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data.pop("schema_version"), data.pop("command")) == (1, "verify")
    data.pop("versions")
    assert data == {
        "ok": False, "error": err.removeprefix("onnxopt: error: ").rstrip("\n"), "exit_code": 2}


def test_inputs_that_are_not_an_npz_are_usage_errors(models, tmp_path, cli):
    a, b, _ = models
    np.save(tmp_path / "plain.npy", np.zeros((1, 7), np.float32))
    (tmp_path / "text.npz").write_text("not a zip")
    cases = [
        (tmp_path / "plain.npy", ("a single NumPy array (.npy), not a .npz file of input arrays "
                                 "named like the model's inputs")),
        (tmp_path, ("not a NumPy .npz file of input arrays ([Errno 21] Is a directory: "
                   f"'{tmp_path}')")),
    ]
    for path, message in cases:
        rc, _, err = cli("verify", a, b, "--inputs", path)
        assert (rc, err) == (2, f"onnxopt: error: {path}: {message}\n"), path
    rc, _, err = cli("verify", a, b, "--inputs", tmp_path / "text.npz")
    assert rc == 2 and err.startswith(f"onnxopt: error: {tmp_path / 'text.npz'}: not a NumPy "
                                      ".npz file") and err.count("\n") == 1


def test_json_paths_that_must_not_be_written_are_refused_before_any_work(models, tmp_path, cli,
                                                                         file_hash):
    a, b, _ = models
    before = file_hash(a), file_hash(b)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = [
        (a, f"--json {a}: is one of the models being compared"),
        (b, f"--json {b}: is one of the models being compared"),
        (tmp_path, f"--json {tmp_path}: is a directory"),
        ("/dev/null", ("--json /dev/null: exists and is not a regular file (a device, a FIFO, "
                      "a socket); give a file path")),
        (fifo, (f"--json {fifo}: exists and is not a regular file (a device, a FIFO, a socket); "
               "give a file path")),
        (tmp_path / "no" / "r.json", (f"--json {tmp_path / 'no' / 'r.json'}: folder "
                                     f"{tmp_path / 'no'} does not exist")),
    ]
    for path, message in cases:
        rc, out, err = cli("verify", a, b, "--json", path)
        assert (rc, out, err) == (2, "", f"onnxopt: error: {message}\n"), path
    assert (file_hash(a), file_hash(b)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.onnx", "b.onnx", "fifo", "off.onnx"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_an_unwritable_json_folder_is_refused(models, tmp_path, cli):
    a, b, _ = models
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    rc, _, err = cli("verify", a, b, "--json", locked / "r.json")
    assert (rc, err) == (2, (f"onnxopt: error: --json {locked / 'r.json'}: folder {locked} is "
                            "not writable\n"))


def test_json_to_stdout_is_the_only_output(models, cli):
    a, b, _ = models
    rc, out, err = cli("verify", a, b, "--json", "-")
    assert (rc, err) == (0, "")
    data = json.loads(out)
    assert data["ok"] is True and len(data["runs"]) == 3


def test_json_is_written_when_verification_cannot_run(models, tmp_path, cli):
    a, _, _ = models
    rc, _, err = cli("verify", a, tmp_path / "missing.onnx", "--json", tmp_path / "r.json")
    assert (rc, err) == (2, f"onnxopt: error: {tmp_path / 'missing.onnx'}: no such file\n")
    assert json.loads((tmp_path / "r.json").read_text())["error"] == (
        f"{tmp_path / 'missing.onnx'}: no such file")
    rc, out, err = cli("verify", a, a, "--shape", "x=1x5000", "--shape", "file=1x7",
                       "--json", "-")
    assert rc == 2
    assert json.loads(out)["error"] == "--shape file: seq is 7 here but 5000 by --shape x"


def test_an_all_random_model_is_not_verified_and_says_why(make_model, tmp_path, cli):
    text = "agraph (float[batch, 4] x) => (float[batch, 4] y) {{ n = {op} <dtype = 1> (x)\n" \
           "  y = Add (x, n) }}"
    onnx.save_model(make_model(text.format(op="RandomNormalLike")), tmp_path / "a.onnx")
    onnx.save_model(make_model(text.format(op="RandomUniformLike")), tmp_path / "b.onnx")
    rc, out, err = cli("verify", tmp_path / "a.onnx", tmp_path / "b.onnx", "--json",
                       tmp_path / "r.json")
    assert (rc, err) == (1, ("onnxopt: error: could not verify: no output can be compared (y "
                            "depends on random op RandomNormalLike (n))\n"))
    assert ("not verified: no output can be compared (y depends on random op RandomNormalLike "
            "(n))") in out
    assert "y: not compared: depends on random op RandomNormalLike (n)" in out
    assert "verify: not verified" in out and "MISMATCH" not in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ok"] is False and data["outputs"][0]["compared"] is False


TEXT = """
agraph (int64[batch, seq] input_ids, int64[batch, seq] attention_mask) => (float[batch, seq] y) {
  ids = Cast <to = 1> (input_ids)
  mask = Cast <to = 1> (attention_mask)
  y = Mul (ids, mask)
}
"""


def test_shape_of_one_input_pins_its_dims_in_every_input(make_model, tmp_path, cli):
    onnx.save_model(make_model(TEXT), tmp_path / "m.onnx")
    rc, out, _ = cli("verify", tmp_path / "m.onnx", tmp_path / "m.onnx", "--shape",
                     "input_ids=1x64", "--json", "-")
    assert rc == 0
    runs = json.loads(out)["runs"]
    assert runs == [{"input_ids": [1, 64], "attention_mask": [1, 64]}] * 3
    rc, out, _ = cli("verify", tmp_path / "m.onnx", tmp_path / "m.onnx", "--shape", "seq=64",
                     "--json", "-")
    assert rc == 0 and [r["attention_mask"] for r in json.loads(out)["runs"]] == [
        [1, 64], [2, 64], [1, 64]]
