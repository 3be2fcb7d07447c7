"""verify's inputs: the user's own (``--inputs``), pinned sizes (``--shape``), longer lengths
where the original refuses short ones, and "could not verify" kept apart from a mismatch."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper


# A reflect Pad of 40 on a symbolic length: the model runs only on inputs longer than 40.
def _reflect_pad_model(pad: int = 40) -> onnx.ModelProto:
    pads = helper.make_tensor("pads", TensorProto.INT64, [4], [0, pad, 0, pad])
    g = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["p"], mode="reflect"),
         helper.make_node("Relu", ["p"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "samples"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])], [pads])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def test_lengths_the_original_refuses_are_retried_longer(tmp_path, cli):
    onnx.save_model(_reflect_pad_model(), tmp_path / "m.onnx")
    rc, _, err = cli("optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q",
                     "--verify", "--json", tmp_path / "r.json")
    assert (rc, err) == (0, "")
    runs = json.loads((tmp_path / "r.json").read_text())["verify"]["runs"]
    assert runs and all(r["x"][1] > 40 for r in runs)


def test_could_not_verify_is_not_a_mismatch(tmp_path, cli):
    onnx.save_model(_reflect_pad_model(pad=5000), tmp_path / "m.onnx")
    rc, _, err = cli("optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q",
                     "--verify")
    assert rc == 1
    assert err.startswith("onnxopt: error: could not verify: the original model does not run "
                          "on any input onnxopt generated (")
    assert err.rstrip().endswith("give inputs with --inputs FILE.npz or sizes with "
                                 "--shape NAME=DIMS")
    assert "differs" not in err and err.count("\n") == 1
    assert (tmp_path / "o.onnx").exists()  # the optimized model itself was written


def test_pinned_shape_and_user_inputs(tmp_path, cli):
    onnx.save_model(_reflect_pad_model(pad=5000), tmp_path / "m.onnx")
    assert cli("optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q")[0] == 0
    rc, _, err = cli("verify", tmp_path / "m.onnx", tmp_path / "o.onnx", "--shape",
                     "samples=6000", "--json", tmp_path / "r.json")
    assert (rc, err) == (0, "")
    data = json.loads((tmp_path / "r.json").read_text())
    assert {r["x"][1] for r in data["runs"]} == {6000} and data["inputs"] == "generated"
    rc, _, err = cli("verify", tmp_path / "m.onnx", tmp_path / "o.onnx", "--shape",
                     "x=3x5001", "--json", tmp_path / "r.json")
    assert (rc, err) == (0, "")
    assert {tuple(r["x"]) for r in json.loads((tmp_path / "r.json").read_text())["runs"]} == {
        (3, 5001)}
    files = []
    for k, n in enumerate((5001, 5500)):
        path = tmp_path / f"in{k}.npz"
        np.savez(path, x=np.random.default_rng(k).standard_normal((1, n)).astype(np.float32))
        files += ["--inputs", path]
    rc, _, err = cli("verify", tmp_path / "m.onnx", tmp_path / "o.onnx", *files,
                     "--json", tmp_path / "r.json")
    assert (rc, err) == (0, "")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["inputs"] == [str(tmp_path / "in0.npz"), str(tmp_path / "in1.npz")]
    assert data["runs"] == [{"x": [1, 5001]}, {"x": [1, 5500]}]


def test_bad_inputs_and_shapes_are_usage_errors(tmp_path, cli):
    onnx.save_model(_reflect_pad_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "wrong.npz", z=np.zeros((1, 50), np.float32))
    cases = [
        (["--inputs", tmp_path / "wrong.npz"],
         f"{tmp_path / 'wrong.npz'}: missing x; not inputs of the model: z"),
        (["--inputs", tmp_path / "nope.npz"], f"{tmp_path / 'nope.npz'}: no such file"),
        (["--shape", "seq"], "--shape seq: expected NAME=DIMS, e.g. input_ids=1x128 or seq=128"),
        (["--shape", "q=5"], ("--shape q: neither an input of the model nor one of its "
                              "symbolic dims (one size) (x, batch, samples)")),
        (["--shape", "x=5"], "--shape x: 1 dims given, the input has 2"),
    ]
    for extra, message in cases:
        rc, _, err = cli("verify", tmp_path / "m.onnx", tmp_path / "m.onnx", *extra)
        assert (rc, err) == (2, f"onnxopt: error: {message}\n"), extra
