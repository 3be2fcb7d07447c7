"""A rule whose output matches its own pattern again is stopped at the rewrite cap, named in
the report and in a one-line warning, and the run ends (it once grew a one-node model to
790 MB in 30 s)."""

from __future__ import annotations

import contextlib
import signal

import onnxopt
from onnxopt import fuse
from onnxopt.ir.builder import NodeBuilder
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.rules.base import Rule

ONE_RELU = """
g (float[2, 3] x) => (float[2, 3] y) {
    y = Relu (x)
}"""


class ReluTwice(Rule):
    """Relu(x) -> Relu(Relu(x)): right, but its output is a Relu again."""

    name = "relu_twice"
    root = "Relu"

    def pattern(self, p: Builder) -> Pat:
        return p.Relu(p.var("x"))

    def rewrite(self, b: NodeBuilder, m: Match, facts):
        return b.op("Relu", b.op("Relu", m.x))


@contextlib.contextmanager
def time_limit(seconds: int):
    """Fail instead of hanging the suite if the rule is not stopped."""

    def expired(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_the_rule_is_stopped_at_the_cap_and_named(make_model):
    with time_limit(60):
        result = onnxopt.optimize(make_model(ONE_RELU), target="cpu", extra_rules=(ReluTwice(),),
                                  return_result=True)
    cap = fuse.rewrite_cap(1)
    regions = result.report.stages["fuse"].regions
    assert [r.status for r in regions if r.rule == "relu_twice"] == ["fused"] * cap + ["refused"]
    stopped = regions[-1]
    assert stopped.detail == (f"stopped after {cap} rewrites in a graph of 1 node(s): its "
                              "output matches its own pattern again")
    assert stopped.code == fuse.STOPPED == "stopped_at_rewrite_cap"
    assert len(result.proto.graph.node) == cap + 1  # the Relus it made before the cap


def test_the_cap_grows_with_the_graph():
    assert fuse.rewrite_cap(1) == fuse.MIN_REWRITE_CAP
    assert fuse.rewrite_cap(10_000) == fuse.REWRITES_PER_NODE * 10_000


def test_optimize_warns_in_one_line_and_writes_the_result(write_model, tmp_path, cli,
                                                          monkeypatch):
    monkeypatch.setattr(fuse, "all_rules", lambda: [ReluTwice()])
    src, out = write_model(ONE_RELU), tmp_path / "o.onnx"
    with time_limit(60):
        code, stdout, err = cli("optimize", src, "-o", out, "--target", "cpu", "-q")
    assert code == 0 and stdout == "" and out.exists()
    cap = fuse.rewrite_cap(1)
    assert err == (f"onnxopt: warning: rule relu_twice was stopped after {cap} rewrites in a "
                   "graph of 1 node(s): its output matches its own pattern again (at node "
                   f"relu_twice/Relu_{cap - 1}; please report this to the rule's author)\n")
