"""The command line, run in-process: --version/--help, optimize, ir, verify."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import onnxopt

ROOT = Path(__file__).resolve().parents[2]


def test_version(cli):
    code, out, err = cli("--version")
    assert (code, out, err) == (0, f"onnxopt, version {onnxopt.__version__}\n", "")


def test_help_has_examples(cli):
    code, out, _ = cli("--help")
    assert code == 0
    assert "Examples:" in out
    assert "onnxopt optimize models/gpt2.ts.onnx" in out
    for command in ("optimize", "ir", "verify"):
        assert f"  {command} " in out


def test_optimize_help_lists_its_options(cli):
    code, out, _ = cli("optimize", "--help")
    assert code == 0
    for option in ("--output", "--json", "--verify", "--no-fuse", "--quiet", "--debug"):
        assert option in out


def test_unknown_command_and_option_are_usage_errors(cli):
    code, _, err = cli("frobnicate")
    assert code == 2 and "No such command 'frobnicate'" in err
    code, _, err = cli("optimize", "--frob", "x.onnx")
    assert code == 2 and "No such option '--frob'" in err


def test_optimize_default_output_and_report(models_dir, tmp_path, cli):
    src = tmp_path / "bert.onnx"
    shutil.copy(models_dir / "bert.dynamo.onnx", src)
    code, out, err = cli("optimize", src)
    assert code == 0, err
    assert (tmp_path / "bert.opt.onnx").is_file()
    assert "nodes by op" in out
    assert "stages: import" in out
    assert out.rstrip().endswith(f"wrote {tmp_path / 'bert.opt.onnx'}")


def test_optimize_quiet_prints_nothing(models_dir, tmp_path, cli):
    assert cli("optimize", models_dir / "vit.ts.onnx", "-o", tmp_path / "v.onnx", "-q") == (0, "", "")


def test_optimize_json_has_counts_and_stage_times(models_dir, tmp_path, cli):
    src = models_dir / "gpt2.ts.onnx"
    report = tmp_path / "r.json"
    code, _, err = cli("optimize", src, "-o", tmp_path / "o.onnx", "--json", report, "-q")
    assert code == 0, err
    data = json.loads(report.read_text())
    assert data["source"] == str(src)
    assert data["output"] == str(tmp_path / "o.onnx")
    # Constant nodes become constants in the IR, so they are not counted as nodes.
    graph = onnx.load(str(src)).graph
    counted = [n for n in graph.node if n.op_type != "Constant"]
    assert data["total_nodes_before"] == len(counted) == sum(data["nodes_before"].values())
    assert data["nodes_before"]["MatMul"] == sum(n.op_type == "MatMul" for n in counted)
    assert data["total_nodes_after"] == sum(data["nodes_after"].values())
    assert {"import", "normalize", "export"} <= set(data["stage_seconds"])
    assert all(isinstance(v, float) and v >= 0 for v in data["stage_seconds"].values())
    assert not list(tmp_path.glob("*.tmp*"))


def test_optimize_verify_exits_0(models_dir, tmp_path, cli):
    report = tmp_path / "r.json"
    code, out, err = cli("optimize", models_dir / "llama.dynamo.onnx", "-o", tmp_path / "o.onnx",
                         "--verify", "--json", report)
    assert code == 0, err
    assert "verify: ok" in out
    data = json.loads(report.read_text())
    assert data["verify"]["ok"] is True
    assert [o["name"] for o in data["verify"]["outputs"]] == ["logits"]


def test_ir_prints_the_graph(models_dir, cli):
    code, out, err = cli("ir", models_dir / "llama.dynamo.onnx")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("# ir_version 10; opsets ai.onnx:18; producer pytorch ")
    assert lines[1] == ("graph main_graph(%input_ids: int64[batch, seq], "
                        "%attention_mask: int64[batch, seq]) -> "
                        "(%logits: float32[batch, seq, 1000]) {")
    assert lines[-1] == "}"
    assert any(" = MatMul(" in line for line in lines)
    # RMSNorm's mean: axes given as an input (opset 18), shown explicit and non-negative
    assert any(line.startswith("  %mean: float32[batch, seq, 1] = ReduceMean(%pow_1, ")
               and line.endswith("<axes=[2], keepdims>") for line in lines)


def test_ir_of_an_onnx_text_model(write_model, cli):
    path = write_model("agraph (float[N] x) => (float[N] y) { y = Relu (x) }")
    code, out, _ = cli("ir", path, "--debug")
    assert code == 0
    assert out == ("# ir_version 10; opsets ai.onnx:18\n"
                   "graph agraph(%x: float32[N]) -> (%y: float32[N]) {\n"
                   "  %y: float32[N] = Relu(%x)\n"
                   "}\n")


def _changed_weight(src: Path, dst: Path) -> None:
    proto = onnx.load(str(src))
    w = next(t for t in proto.graph.initializer if len(t.dims) == 2)
    arr = numpy_helper.to_array(w) * np.float32(1.5)
    w.CopyFrom(numpy_helper.from_array(arr, w.name))
    onnx.save_model(proto, dst)


def test_verify_same_model_exits_0(models_dir, cli):
    code, out, err = cli("verify", models_dir / "t5enc.ts.onnx", models_dir / "t5enc.ts.onnx")
    assert code == 0, err
    assert "bitwise equal" in out and "verify: ok" in out


def test_verify_different_models_exits_1(models_dir, tmp_path, cli):
    src = models_dir / "gpt2.ts.onnx"
    _changed_weight(src, tmp_path / "changed.onnx")
    report = tmp_path / "v.json"
    code, out, err = cli("verify", src, tmp_path / "changed.onnx", "--json", report)
    assert code == 1
    assert err == "onnxopt: error: outputs differ beyond tolerance: logits\n"
    assert "MISMATCH" in out and "verify: FAILED" in out
    assert "max abs" in out and "max rel" in out
    data = json.loads(report.read_text())
    (logits,) = data["outputs"]
    assert logits["name"] == "logits" and logits["ok"] is False and logits["bitwise"] is False
    assert logits["max_abs"] > 0 and logits["max_rel"] > logits["tolerance"] == 1e-4
    assert len(data["runs"]) == 3  # --runs default


def test_verify_reports_max_abs_and_rel_per_output(make_model, tmp_path, cli):
    text = """
        agraph (float[batch, 4] x) => (float[batch, 4] a, float[batch, 4] b)
          <float[4] w = {1.0, 1.0, 1.0, 1.0}> {
          a = Add (x, w)
          b = Mul (x, w)
        }"""
    onnx.save_model(make_model(text), tmp_path / "one.onnx")
    two = make_model(text)
    two.graph.initializer[0].CopyFrom(numpy_helper.from_array(
        np.array([1.0, 1.0, 1.0, 1.25], np.float32), "w"))
    onnx.save_model(two, tmp_path / "two.onnx")
    code, out, err = cli("verify", tmp_path / "one.onnx", tmp_path / "two.onnx", "--json",
                         tmp_path / "v.json")
    assert code == 1
    assert err == "onnxopt: error: outputs differ beyond tolerance: a, b\n"
    outputs = {o["name"]: o for o in json.loads((tmp_path / "v.json").read_text())["outputs"]}
    assert outputs["a"]["max_abs"] == 0.25
    assert 0 < outputs["b"]["max_abs"] and 0 < outputs["a"]["max_rel"] < 1
    rows = [line.split() for line in out.splitlines()]  # plain rows: stdout is not a terminal
    table = [row for row in rows if row[0] in ("a", "b")]
    assert [row[:2] for row in table] == [["a", "float32"], ["b", "float32"]]
    assert table[0][2] == "0.25"  # the max abs column
    assert all(row[-1] == "MISMATCH" for row in table)


def test_console_script_exit_code(tmp_path):
    """``python -m onnxopt`` exits with the code (not only returns it) and prints one line."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "onnxopt", "optimize", str(tmp_path / "no.onnx")],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr == f"onnxopt: error: {tmp_path / 'no.onnx'}: no such file\n"
    assert done.stdout == ""
