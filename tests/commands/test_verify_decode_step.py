"""``onnxopt verify`` and ``optimize --verify`` on a decoder whose attention switches kernels by
query length: a run at one query after a cache says it is the decode step, and a wrong decode
branch is a FAILED verification."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ROOT / "models" / "with_past" / "gpt2_with_past.ts.onnx"


def _wrong_decode_branch(path: Path, out: Path) -> None:
    """The optimized file with its first switch's few-query branch scaled by 1.01."""
    proto = onnx.load(str(path))
    switch = next(n for n in proto.graph.node if n.op_type == "If" and any(
        p.key == "onnxopt.switch_queries" for p in n.metadata_props))
    branch = next(a.g for a in switch.attribute if a.name == "then_branch")
    first = branch.output[0]
    branch.node.append(helper.make_node(
        "Constant", [], ["scale"], value=numpy_helper.from_array(np.array(1.01, np.float32))))
    branch.node.append(helper.make_node("Mul", [first.name, "scale"], ["scaled"]))
    first.name = "scaled"
    onnx.save_model(proto, str(out))


def test_optimize_verify_compares_a_decode_step_and_a_wrong_one_fails(tmp_path, cli):
    optimized = tmp_path / "gpt2.onnx"
    # (a prompt long enough for causal blocks: the attention switches on the query length)
    rc, out, err = cli("optimize", GPT2, "-o", optimized, "--target", "cpu", "--verify",
                       "--workload", "prefill:seq=512", "--workload", "decode",
                       "--json", tmp_path / "r.json")
    assert rc == 0, err
    runs = json.loads((tmp_path / "r.json").read_text())["verify"]["runs"]
    assert runs[-1]["input_ids"] == [2, 1] and runs[-1]["past_key_values.0.key"][2] > 0

    rc, out, _ = cli("verify", GPT2, optimized, "--json", tmp_path / "v.json")
    assert rc == 0
    runs = json.loads((tmp_path / "v.json").read_text())["runs"]
    assert runs[-1]["input_ids"] == [2, 1]
    assert f"run {len(runs)} is a decode step (one query after a cache)" in out

    wrong = tmp_path / "wrong.onnx"
    _wrong_decode_branch(optimized, wrong)
    rc, out, _ = cli("verify", GPT2, wrong)
    assert rc != 0 and "verify: FAILED" in out
