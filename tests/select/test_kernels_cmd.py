"""``onnxopt kernels`` and the selection options of ``onnxopt optimize``."""

from __future__ import annotations

import json

GELU = """
g (float[B,S,16] x) => (float[B,S,16] y) {
  y = ai.onnxopt.GeluFused <approximate="none"> (x)
}"""


def test_kernels_lists_the_registry(cli):
    code, out, _ = cli("kernels")
    assert code == 0
    for name in ("ort.MultiHeadAttention", "onnx.LayerNormalization-17",
                 "decompose.RMSNormFused.ort_fusable", "decompose.AttentionFused"):
        assert name in out


def test_kernels_json_filters_by_op_and_target(cli):
    code, out, _ = cli("kernels", "--json", "--op", "GeluFused", "--target", "cpu")
    assert code == 0
    data = json.loads(out)["kernels"]
    assert data and {k["implements"] for k in data} == {"GeluFused"}
    assert all("CPUExecutionProvider" in k["providers"] for k in data)
    fast = next(k for k in data if k["name"] == "ort.FastGelu")
    assert fast["opsets"] == {"com.microsoft": 1}


def test_kernels_unknown_op_is_a_usage_error(cli):
    code, _, err = cli("kernels", "--op", "NoSuchFused")
    assert code != 0 and "unknown fused op 'NoSuchFused'" in err


def test_optimize_passes_selection_options(cli, write_model, tmp_path):
    src = write_model(GELU, opset=20, extra_opsets={"ai.onnxopt": 1})
    reasons = {}
    for flag, value in (("--ort-version", "1.10"), ("--opset", "19")):
        report = tmp_path / "r.json"
        code, _, err = cli("optimize", src, "-o", tmp_path / "o.onnx", "--target", "cpu",
                           flag, value, "--json", report, "-q")
        assert code == 0, err
        (node,) = json.loads(report.read_text())["select"]["nodes"]
        reasons[flag] = node["rejected"]["onnx.Gelu-20"]
    assert reasons == {"--ort-version": "needs ONNX Runtime 1.17, target is 1.10",
                       "--opset": "needs opset 20; the target allows opset 19"}


def test_optimize_tune_writes_the_cache(cli, write_model, tmp_path):
    src = write_model(GELU, extra_opsets={"ai.onnxopt": 1})
    cache = tmp_path / "t.json"
    report = tmp_path / "r.json"
    code, _, err = cli("optimize", src, "-o", tmp_path / "o.onnx", "--target", "cpu", "--tune",
                       "--tune-cache", cache, "--json", report, "-q")
    assert code == 0, err
    assert json.loads(cache.read_text())["entries"]
    data = json.loads(report.read_text())["select"]
    (signature,) = data["tuning"]["shapes"]["prefill b1 s128 p0"]  # timed at the regime's sizes
    assert data["tuning"] == {"cache": str(cache), "signatures_timed": 1,
                              "shapes": {"prefill b1 s128 p0": [signature]}}
    assert signature.startswith("GeluFused|")
    assert data["nodes"][0]["basis"] == "tuned"


def test_optimize_rejects_a_malformed_ort_version(cli, write_model, tmp_path):
    src = write_model(GELU, extra_opsets={"ai.onnxopt": 1})
    code, _, err = cli("optimize", src, "-o", tmp_path / "o.onnx", "--ort-version", "latest")
    assert code != 0 and "--ort-version latest" in err
