"""The safeguard: a result that fails the output checks (or a stage that raises) is never
written; what caused it is held back, the rest of the optimization is kept, and the
report says what was held back and why."""

from __future__ import annotations

import os

import onnx
import onnxruntime as ort
import pytest
from onnx import AttributeProto

import onnxopt
from onnxopt.ir.node import Attr
from onnxopt.normalize import driver
from onnxopt.rewrite.driver import PassResult

TEXT = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 8] x) => (float[2, 8] y) {
    a = Relu(x)
    i = Identity(a)
    y = Neg(i)
}
"""


def _poison_relu(model) -> PassResult:
    """A broken pass: gives every Relu an attribute ONNX Runtime refuses to load (an edit in
    place, told to the graph as every pass tells it)."""
    changed = 0
    for node in model.graph:
        if node.op_type == "Relu" and "bogus" not in node.attrs:
            node.attrs["bogus"] = Attr(AttributeProto.INT, 1)
            model.graph.changed(node)
            changed += 1
    return PassResult(changed)


def _crash(model) -> PassResult:
    raise RuntimeError("a bug in a pass")


def _loads(model: onnx.ModelProto) -> bool:
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return True


@pytest.fixture
def model() -> onnx.ModelProto:
    return onnx.parser.parse_model(TEXT)


def test_a_pass_that_breaks_the_result_is_held_back(model, monkeypatch):
    monkeypatch.setattr(driver, "PASSES", [*driver.PASSES, ("poison_relu", _poison_relu)])
    result = onnxopt.optimize(model, target="cpu", return_result=True)
    guard = result.report.stages["safeguard"]
    assert guard["held_back"] == ["pass:poison_relu"]
    assert guard["fallback"] == "partial"
    assert guard["problem"].startswith("the ONNX checker refuses it: Unrecognized attribute: bogus")
    assert [(e["kind"], e["pass"], e["held_back"]) for e in guard["lost"]] == [
        ("pass", "poison_relu", True)]
    assert guard["lost"][0]["reason"] == guard["problem"]
    assert _loads(result.proto)
    # the rest of normalization still ran: the Identity is gone
    assert [n.op_type for n in result.proto.graph.node] == ["Relu", "Neg"]


def test_a_stage_that_raises_is_worked_around_and_reported(model, monkeypatch, tmp_path, cli):
    monkeypatch.setattr(driver, "PASSES", [*driver.PASSES, ("crash", _crash)])
    onnx.save_model(model, tmp_path / "m.onnx")
    rc, _, err = cli("optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q",
                       "--target", "cpu")
    assert rc == 0
    assert err.startswith("onnxopt: warning: internal error in stage normalize: RuntimeError: "
                          "a bug in a pass; partial result written (please report this)")
    assert _loads(onnx.load(tmp_path / "o.onnx"))


def test_with_debug_a_stage_that_raises_still_raises(model, monkeypatch):
    monkeypatch.setattr(driver, "PASSES", [*driver.PASSES, ("crash", _crash)])
    with pytest.raises(RuntimeError, match="a bug in a pass"):
        onnxopt.optimize(model, target="cpu", debug=True)


def test_a_passing_result_says_so(model):
    result = onnxopt.optimize(model, target="cpu", return_result=True)
    assert result.report.stages["safeguard"] == {"checks": "passed"}


def test_a_result_that_fails_its_checks_leaves_no_staged_file(model, monkeypatch, tmp_path):
    """The first result's bytes are written beside the output while its checks run; when the
    checks fail, that file goes and only the held-back result is written."""
    monkeypatch.setattr(driver, "PASSES", [*driver.PASSES, ("poison_relu", _poison_relu)])
    out = tmp_path / "o.onnx"
    result = onnxopt.optimize(model, out, target="cpu", return_result=True)
    assert result.report.stages["safeguard"]["held_back"] == ["pass:poison_relu"]
    assert result.serialized is None and result.staged is None  # the search's results keep none
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx"]
    written = onnx.load(out)
    assert _loads(written)
    assert [n.op_type for n in written.graph.node] == ["Relu", "Neg"]


def test_a_passing_result_is_written_from_the_bytes_staged_during_its_checks(model, tmp_path):
    out = tmp_path / "o.onnx"
    result = onnxopt.optimize(model, out, target="cpu", return_result=True)
    assert result.staged is not None and result.staged.tmp is None  # committed, not rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx"]
    assert out.read_bytes() == result.proto.SerializeToString()


def test_an_output_that_cannot_be_written_is_a_usage_error_and_leaves_nothing(
        model, monkeypatch, tmp_path):
    """The staged write fails (a full disk, a folder the user may not write): the error is
    the one-line usage error the writer gives, raised before any check starts a child."""
    from onnxopt.errors import UsageError
    from onnxopt.exporter import save

    def refuse(path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(save, "_temp_beside", refuse)
    with pytest.raises(UsageError, match="cannot write output: No space left on device"):
        onnxopt.optimize(model, tmp_path / "o.onnx", target="cpu")
    assert list(tmp_path.iterdir()) == []


def test_an_output_folder_named_in_bytes_that_are_not_utf8_is_checked_from_bytes(model, tmp_path):
    """The checker's and ORT's C++ take UTF-8 paths; the staged file beside such an output is
    not theirs to open, so the checks load the bytes, and the result passes as it should."""
    folder = tmp_path / "caf\udce9"  # the byte 0xE9 on its own: Latin-1, not UTF-8
    folder.mkdir()
    out = folder / "o.onnx"
    result = onnxopt.optimize(model, out, target="cpu", return_result=True)
    assert result.report.stages["safeguard"] == {"checks": "passed"}
    assert out.read_bytes() == result.proto.SerializeToString()


def test_a_staged_file_its_owner_cannot_read_is_checked_from_bytes(model, tmp_path, monkeypatch):
    """A umask that leaves the owner no read permission (root reads regardless, so the test
    says so through ``os.access``): the checks load the bytes instead."""
    from onnxopt import safeguard

    seen = []
    access = os.access

    def unreadable_staged(path, mode):
        if str(path).endswith(".tmp") and mode == os.R_OK:
            seen.append(str(path))
            return False
        return access(path, mode)

    monkeypatch.setattr(safeguard.os, "access", unreadable_staged)
    out = tmp_path / "o.onnx"
    result = onnxopt.optimize(model, out, target="cpu", return_result=True)
    assert seen and seen[0].endswith(".tmp")
    assert result.report.stages["safeguard"] == {"checks": "passed"}
    assert result.serialized is not None  # checked from the bytes, then written from the file
    assert out.read_bytes() == result.proto.SerializeToString()


def test_the_input_as_it_was_carries_no_positions_of_another_proto(tmp_path):
    """The last resort writes the input's own proto; the round trip's note of which of its
    initializers are the file's bytes is by position in the round trip's proto, not in that
    one, so it is not carried over."""
    import numpy as np
    from onnx import helper, numpy_helper

    from onnxopt.api import write_result
    from onnxopt.options import OptimizeOptions
    from onnxopt.safeguard import _Guard

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")])
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original.ir_version = 8
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save_model(original, src)
    result = _Guard(str(src), OptimizeOptions(target="cpu"))._original()
    assert result.passthrough and result.encoded == {}
    write_result(result, str(out), str(src))
    assert onnx.load(out).graph.initializer == original.graph.initializer
