"""``onnxopt run``: models with ai.onnxopt.cuda ops on the CPU, inputs from .npz, errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.runtime import cuda_available, session
from onnxopt.runtime.ops.examples import attention_feeds, attention_model


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """The example attention model optimized for CUDA (it holds a FlashAttention node)."""
    path = tmp_path_factory.mktemp("run") / "attention.opt.onnx"
    onnx.save(run_pipeline(attention_model(), OptimizeOptions(target="cuda")).proto, path)
    return path


def test_random_inputs_on_the_cpu(cli, optimized, tmp_path):
    out = tmp_path / "out.npz"
    code, stdout, stderr = cli("run", optimized, "--provider", "cpu", "--batch", "2",
                               "--seq", "9", "-o", out)
    assert code == 0, stderr
    assert "provider: CPUExecutionProvider" in stdout
    assert "o: shape [2, 8, 9, 64] float16  min " in stdout
    assert stdout.rstrip().endswith(f"wrote {out}")
    assert "(FlashAttention) run as their host implementations on the CPU (libonnxopt_ops)" in stderr
    with np.load(out) as data:
        assert data["o"].shape == (2, 8, 9, 64)


def test_inputs_from_npz_match_the_session(cli, optimized, tmp_path):
    feeds = attention_feeds(attention_model(), 2, 11, pad=(0, 4))
    np.savez(tmp_path / "in.npz", **feeds)
    code, _, err = cli("run", optimized, "--inputs", tmp_path / "in.npz", "-o",
                       tmp_path / "out.npz")
    assert code == 0, err
    (want,) = session(str(optimized), providers=["CPUExecutionProvider"]).run(None, feeds)
    with np.load(tmp_path / "out.npz") as data:
        np.testing.assert_array_equal(data["o"], want)


def test_plain_model(cli, models_dir):
    code, out, err = cli("run", models_dir / "gpt2.ts.onnx", "--provider", "cpu")
    assert code == 0, err
    assert "logits: shape [1, 16, 1000] float32" in out
    assert err == ""


def test_missing_and_unknown_inputs(cli, optimized, tmp_path):
    np.savez(tmp_path / "in.npz", q=np.zeros(1), extra=np.zeros(1))
    code, _, err = cli("run", optimized, "--inputs", tmp_path / "in.npz")
    assert code == 2
    assert err == (f"onnxopt: error: {tmp_path / 'in.npz'}: missing attention_mask, k, v; "
                   "not inputs of the model: extra\n")


def test_left_padding_runs(cli, optimized, tmp_path):
    """Left padding used to be refused at run time; the kernel now takes per-row key ranges."""
    feeds = attention_feeds(attention_model(), 2, 8)
    feeds["attention_mask"][0, 0] = 0
    np.savez(tmp_path / "in.npz", **feeds)
    code, _, err = cli("run", optimized, "--inputs", tmp_path / "in.npz", "--provider", "cpu",
                       "-o", tmp_path / "out.npz")
    assert code == 0, err
    (note,) = err.splitlines()
    assert note.startswith("note: the ai.onnxopt.cuda ops (FlashAttention) run as")
    assert np.isfinite(np.load(tmp_path / "out.npz")["o"].astype(np.float32)).all()


def test_a_kernel_error_is_one_line(cli, optimized, tmp_path):
    feeds = attention_feeds(attention_model(), 2, 8)
    feeds["q"] = feeds["q"][:, :3]  # 3 query heads cannot share 2 key/value heads
    np.savez(tmp_path / "in.npz", **feeds)
    code, _, err = cli("run", optimized, "--inputs", tmp_path / "in.npz", "--provider", "cpu")
    assert code == 1
    note, error = err.splitlines()  # ORT's own log of the failure is silenced
    assert note.startswith("note: the ai.onnxopt.cuda ops (FlashAttention) run as")
    assert error.startswith(f"onnxopt: error: {optimized}: ONNX Runtime failed: ")


@pytest.mark.skipif(cuda_available.available(), reason="CUDA is usable here")
def test_cuda_without_cuda_is_one_line_and_exit_1(cli, optimized, models_dir):
    reason = cuda_available.unavailable_reason()
    code, out, err = cli("run", optimized, "--provider", "cuda")
    assert (code, out) == (1, "")
    assert err == (f"onnxopt: error: the model needs onnxopt's CUDA kernels (FlashAttention), "
                   f"but {reason}; run it with --provider cpu to use their host implementations\n")
    code, _, err = cli("run", models_dir / "gpt2.ts.onnx", "--provider", "cuda")
    assert (code, err) == (1, f"onnxopt: error: --provider cuda: {reason}\n")


def test_missing_model(cli, tmp_path):
    code, _, err = cli("run", tmp_path / "nope.onnx")
    assert (code, err) == (2, f"onnxopt: error: {tmp_path / 'nope.onnx'}: no such file\n")


def test_run_reports_a_file_that_is_not_a_model_in_one_line(tmp_path, cli):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    code, _, err = cli("run", bad)
    assert code == 1
    assert err.startswith(f"onnxopt: error: {bad}: not an ONNX model")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
