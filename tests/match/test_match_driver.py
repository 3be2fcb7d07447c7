"""The fusion driver: worklist, regions for explain, --only/--disable, rule stamps."""

from __future__ import annotations

import pytest

from onnxopt.errors import UsageError
from onnxopt.importer import import_model
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline

SILU_TWICE = """
g (float[B, 8] x) => (float[B, 8] y) {
    s = Sigmoid (x)
    a = Mul (x, s)
    t = Sigmoid (a)
    y = Mul (a, t)
}
"""


def test_both_chained_blocks_fuse_and_carry_the_rule_name(make_model):
    from onnxopt import normalize
    from onnxopt.legality.target import run_target
    from onnxopt.pipeline import fuse_and_settle

    model = import_model(make_model(SILU_TWICE))
    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    report = fuse_and_settle(model, options, run_target(options, model.opset))
    assert report.count("silu") == 2
    fused = [n for n in model.graph if n.op_type == "SiluFused"]
    assert len(fused) == 2 and {n.created_by for n in fused} == {"silu"}


def test_only_and_disable_switch_rules(make_model):
    proto = make_model(SILU_TWICE)
    off = run_pipeline(proto, OptimizeOptions(target="cpu", disable=frozenset({"silu"})))
    assert off.report.stages["fuse"].count("silu") == 0
    only = run_pipeline(proto, OptimizeOptions(target="cpu", only=frozenset({"silu"})))
    assert only.report.stages["fuse"].count("silu") == 2
    assert set(only.report.stages["fuse"].summary()) == {"silu"}


def test_unknown_rule_is_a_usage_error(make_model):
    with pytest.raises(UsageError, match="unknown rule 'nope'"):
        run_pipeline(make_model(SILU_TWICE), OptimizeOptions(only=frozenset({"nope"})))


def test_explain_cli_lists_regions_and_kernels(models_dir, cli):
    code, out, _ = cli("explain", models_dir / "bert.dynamo.onnx", "--target", "cpu")
    assert code == 0
    assert "fused  attention" in out and "kernel " in out
    code, out, _ = cli("explain", models_dir / "bert.dynamo.onnx", "--rule", "gelu")
    assert code == 0 and "attention" not in out.split("fusion")[0]
