"""Import → export of every real model keeps the model's interface and its numbers."""

from __future__ import annotations

import onnx

import onnxopt


def _interface(path) -> dict[str, list[tuple[str, str]]]:
    """Graph inputs and outputs as (name, serialized type): names, dtypes and symbolic shapes."""
    g = onnx.load(str(path), load_external_data=False).graph
    init = {t.name for t in g.initializer}
    return {
        "inputs": [(vi.name, vi.type.SerializeToString().hex()) for vi in g.input
                   if vi.name not in init],
        "outputs": [(vi.name, vi.type.SerializeToString().hex()) for vi in g.output],
    }


def test_no_fuse_round_trip_is_exact(model_path, tmp_path, cli, file_hash):
    out = tmp_path / "out.onnx"
    before = file_hash(model_path)
    code, _, err = cli("optimize", model_path, "-o", out, "--no-fuse", "-q")
    assert code == 0, err
    assert err == ""
    assert file_hash(model_path) == before
    onnx.checker.check_model(str(out), full_check=True)
    assert _interface(out) == _interface(model_path)
    report = onnxopt.verify(model_path, out)
    assert report.bitwise, report.to_json()


def test_default_run_verifies(model_path, tmp_path, cli):
    out = tmp_path / "out.onnx"
    code, _, err = cli("optimize", model_path, "-o", out, "-q")
    assert code == 0, err
    onnx.checker.check_model(str(out), full_check=True)
    assert _interface(out) == _interface(model_path)
    report = onnxopt.verify(model_path, out)
    assert report.ok, report.to_json()


def test_export_keeps_symbolic_dims_and_opset(models_dir, tmp_path, cli):
    src = models_dir / "gpt2.dynamo.onnx"
    out = tmp_path / "gpt2.onnx"
    assert cli("optimize", src, "-o", out, "--no-fuse", "-q")[0] == 0
    m = onnx.load(str(out))
    dims = [d.dim_param for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "seq"]
    opsets = {o.domain: o.version for o in m.opset_import}
    assert opsets[""] == 18
    assert m.ir_version == 10
