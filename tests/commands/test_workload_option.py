"""``optimize --workload``: the regimes kernels are ranked at; a malformed one is a usage error
before any work (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
import shutil

import pytest


@pytest.fixture
def model(models_dir, tmp_path):
    path = tmp_path / "m.onnx"
    shutil.copy(models_dir / "with_past" / "gpt2_with_past.ts.onnx", path)
    return path


@pytest.mark.parametrize("given, says", [
    ("decode:batch=x", ("--workload decode:batch=x: 'batch=x' is not KEY=NUMBER with KEY one "
                        "of batch, seq, past (e.g. decode:batch=4,past=1024 or "
                        "prefill:batch=1,seq=512)")),
    ("serve", ("--workload serve: the regime must be one of prefill, decode (e.g. "
               "decode:batch=4,past=1024 or prefill:batch=1,seq=512)")),
])
def test_a_malformed_workload_is_a_usage_error(cli, model, tmp_path, given, says):
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = cli("optimize", model, "--workload", given)
    assert (code, out) == (2, ""), err
    assert err == f"onnxopt: error: {says}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_the_stated_workload_is_the_one_ranked_and_reported(cli, model, tmp_path):
    report = tmp_path / "r.json"
    code, _, err = cli("optimize", model, "-o", tmp_path / "o.onnx", "--target", "cpu",
                       "--workload", "decode:batch=4,past=512", "--workload", "prefill:seq=512",
                       "--json", report)
    assert code == 0, err
    data = json.loads(report.read_text())
    assert data["options"]["workload"] == ["decode:batch=4,past=512", "prefill:seq=512"]
    assert data["select"]["workload"] == [
        {"kind": "decode", "batch": 4, "seq": 1, "past": 512},
        {"kind": "prefill", "batch": 1, "seq": 512, "past": 0}]
    attention = [n for n in data["select"]["nodes"] if n["op"] == "AttentionFused"]
    assert all(set(n["regimes"]) == {"decode b4 s1 p512", "prefill b1 s512 p0"}
               for n in attention)
