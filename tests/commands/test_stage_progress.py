"""Stage progress without a terminal: a line on stderr for each stage that runs long
(``onnxopt: checks… 12.3 s``), nothing for a quick one or under ``-q``; and every stage timed
in the report, the weights' write among them."""

from __future__ import annotations

import json
import re
import time

from onnxopt.commands import optimize_cmd, progress
from onnxopt.commands.progress import StageClock, stage_progress

STAGE_LINE = re.compile(r"onnxopt: ([a-z_]+)\u2026 \d+\.\d s")


def stage_lines(err: str) -> list[str]:
    lines = err.splitlines()
    assert all(STAGE_LINE.fullmatch(line) for line in lines), lines
    return [STAGE_LINE.fullmatch(line).group(1) for line in lines]


def test_every_stage_gets_a_line_once_it_runs_long(models_dir, tmp_path, cli, monkeypatch):
    monkeypatch.setattr(progress, "LINE_AFTER_SECONDS", 0.0)  # every stage is "long" here
    code, out, err = cli("optimize", models_dir / "gpt2.ts.onnx", "-o", tmp_path / "o.onnx",
                         "--target", "cpu", "--verify")
    assert code == 0, err
    assert stage_lines(err) == ["import", "normalize", "fuse", "select", "cleanup", "export",
                                "write", "checks", "write", "verify"]
    assert "verify: ok" in out


def test_a_quick_stage_says_nothing_and_a_slow_one_its_line(models_dir, tmp_path, cli,
                                                            monkeypatch):
    verify = optimize_cmd.verify_isolated

    def slow_verify(*args, **kwargs):
        time.sleep(progress.LINE_AFTER_SECONDS + 0.3)
        return verify(*args, **kwargs)

    monkeypatch.setattr(optimize_cmd, "verify_isolated", slow_verify)
    code, _, err = cli("optimize", models_dir / "gpt2.ts.onnx", "-o", tmp_path / "o.onnx",
                       "--target", "cpu", "--verify")
    assert code == 0, err
    assert stage_lines(err) == ["verify"]
    assert float(err.split()[-2]) >= progress.LINE_AFTER_SECONDS + 0.3


def test_quiet_says_nothing_and_still_times_every_stage(models_dir, tmp_path, cli, monkeypatch):
    monkeypatch.setattr(progress, "LINE_AFTER_SECONDS", 0.0)
    code, out, err = cli("optimize", models_dir / "gpt2.ts.onnx", "-o", tmp_path / "o.onnx",
                         "--target", "cpu", "--verify", "-q", "--json", tmp_path / "r.json")
    assert (code, out, err) == (0, "", "")
    seconds = json.loads((tmp_path / "r.json").read_text())["stage_seconds"]
    assert list(seconds) == ["import", "normalize", "fuse", "select", "cleanup", "export",
                             "write", "checks", "verify"]


def test_the_printed_stage_times_include_the_write(models_dir, tmp_path, cli):
    code, out, err = cli("optimize", models_dir / "bert.ts.onnx", "-o", tmp_path / "o.onnx",
                         "--target", "cpu")
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.startswith("stages: ")]
    assert " write " in line and " checks " in line


def test_the_clock_sums_a_stage_entered_twice_and_keeps_the_pipelines_own_times():
    clock = StageClock()
    for name in ("export", "write", "checks", "write"):
        clock(name)
        time.sleep(0.01)
    clock.end()
    assert list(clock.seconds) == ["export", "write", "checks"]
    assert clock.seconds["write"] >= 0.02
    times = {"export": 123.0}
    clock.add_to(times)
    assert times["export"] == 123.0 and set(times) == {"export", "write", "checks"}


def test_a_stage_that_ends_as_its_line_is_due_leaves_no_half_line(capsys, monkeypatch):
    monkeypatch.setattr(progress, "LINE_AFTER_SECONDS", 0.001)
    with stage_progress() as clock:
        for _ in range(200):
            clock("checks")
            time.sleep(0.001)
            clock.end()
    err = capsys.readouterr().err
    assert all(STAGE_LINE.fullmatch(line) for line in err.splitlines())
    assert err == "" or err.endswith("\n")


def test_kernels_build_says_it_is_building(monkeypatch, tmp_path, capsys):
    from onnxopt.cli import main
    from onnxopt.runtime.cuda import compiler

    monkeypatch.setattr(progress, "LINE_AFTER_SECONDS", 0.0)
    monkeypatch.setattr(compiler, "find_nvcc", lambda: "nvcc")
    monkeypatch.setattr(compiler, "build_images", lambda *a, **k: [])
    assert main(["kernels", "--build", "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert stage_lines(err) == ["build"] and out.startswith("built 0 images")
