"""Options the commands used to ignore in silence are usage errors (issue 29), each one line,
exit 2, raised before any work: nothing is written."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import onnxruntime
import pytest


@pytest.fixture
def model(models_dir, tmp_path):
    """ViT (opset 17) in a folder of its own."""
    path = tmp_path / "m.onnx"
    shutil.copy(models_dir / "vit.ts.onnx", path)
    return path


def _refused(cli, tmp_path, *args, says):
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = cli(*args)
    assert (code, out) == (2, ""), err
    assert err == f"onnxopt: error: {says}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_inputs_and_shape_without_verify(cli, model, tmp_path):
    np.savez(tmp_path / "in.npz", pixel_values=np.zeros((1, 3, 32, 32), np.float32))
    says = ("--inputs and --shape choose what --verify compares on; add --verify (without it "
            "they would be ignored)")
    _refused(cli, tmp_path, "optimize", model, "--inputs", tmp_path / "in.npz", says=says)
    _refused(cli, tmp_path, "optimize", model, "--shape", "pixel_values=1x3x32x32", says=says)


@pytest.mark.parametrize("command", ["optimize", "explain"])
def test_a_rule_both_asked_for_and_disabled(cli, model, tmp_path, command):
    _refused(cli, tmp_path, command, model, "--only", "gelu", "--disable", "gelu",
             says="--only and --disable both name gelu; give each rule to one of them")


@pytest.mark.parametrize("command", ["optimize", "explain"])
def test_an_unknown_rule_before_any_work(cli, model, tmp_path, command):
    _refused(cli, tmp_path, command, model, "--disable", "nope",
             says="unknown rule 'nope' given to --disable (rules: attention, gelu, group_norm, "
                  "group_norm_silu, layer_norm, rms_norm, rotary, silu, swiglu)")


def test_opset_above_the_models_own(cli, model, tmp_path):
    _refused(cli, tmp_path, "optimize", model, "--opset", "23",
             says=f"--opset 23: {model} imports opset 17, and onnxopt never converts a model's "
                  "opset; --opset can only lower the opset emitted kernels may need (1 to 17)")


def test_opset_above_what_onnx_knows(cli, model, tmp_path):
    newest = onnx.defs.onnx_opset_version()
    _refused(cli, tmp_path, "optimize", model, "--opset", str(newest + 1),
             says=f"--opset {newest + 1}: the installed onnx {onnx.__version__} knows opsets "
                  f"up to {newest}")


def test_opset_and_ort_version_that_are_honoured_still_work(cli, model, tmp_path):
    code, _, err = cli("optimize", model, "-o", tmp_path / "o.onnx", "--opset", "17",
                       "--ort-version", "1.20", "--target", "cpu", "-q")
    assert (code, err) == (0, "")


def test_ort_version_newer_than_the_installed_one(cli, model, tmp_path):
    _refused(cli, tmp_path, "optimize", model, "--ort-version", "9.99",
             says=f"--ort-version 9.99: newer than the installed ONNX Runtime "
                  f"{onnxruntime.__version__}; onnxopt checks every result by loading it in the "
                  "installed one, so it can aim only at that version or an older one")


def test_ort_version_that_is_not_one(cli, model, tmp_path):
    _refused(cli, tmp_path, "optimize", model, "--ort-version", "latest",
             says="--ort-version latest: expected MAJOR.MINOR, e.g. 1.20")


@pytest.mark.parametrize("content", ["{not json", '{"format": 99, "entries": {}}', "[]"])
@pytest.mark.parametrize("tune", [False, True])
def test_a_corrupt_tune_cache(cli, model, tmp_path, content, tune):
    """Read as no decisions at all, then (with --tune) overwritten: now refused."""
    cache = tmp_path / "tuning.json"
    cache.write_text(content)
    before = cache.read_text()
    code, _, err = cli("optimize", model, "--tune-cache", cache, *(["--tune"] if tune else []))
    assert code == 2 and err.startswith(f"onnxopt: error: {cache}: --tune-cache "), err
    assert "remove it or name another file" in err
    assert cache.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "tuning.json"]


def test_a_missing_tune_cache_without_tune(cli, model, tmp_path):
    cache = tmp_path / "tuning.json"
    _refused(cli, tmp_path, "optimize", model, "--tune-cache", cache,
             says=f"{cache}: no such file (--tune-cache without --tune only reads decisions; "
                  "add --tune to time kernels and write them there)")


def test_a_tune_cache_equal_to_the_output(cli, model, tmp_path):
    _refused(cli, tmp_path, "optimize", model, "-o", tmp_path / "o.onnx", "--tune",
             "--tune-cache", tmp_path / "o.onnx",
             says=f"{tmp_path / 'o.onnx'}: --tune-cache names the same file as -o; give each "
                  "output a path of its own")


def test_what_no_fuse_would_ignore(cli, model, tmp_path):
    _refused(cli, tmp_path, "optimize", model, "--no-fuse", "--only", "gelu", "--opset", "17",
             says="--no-fuse rewrites nothing, so --only, --opset would be ignored; leave out "
                  "one or the other")


def test_run_takes_one_input_set(cli, model, tmp_path):
    """``run --inputs a --inputs b`` used to run on b alone."""
    for name in ("a.npz", "b.npz"):
        np.savez(tmp_path / name, pixel_values=np.zeros((1, 3, 32, 32), np.float32))
    _refused(cli, tmp_path, "run", model, "--inputs", tmp_path / "a.npz", "--inputs",
             tmp_path / "b.npz", "-o", tmp_path / "out.npz",
             says="--inputs given 2 times: run takes one input set (run it once per file)")
