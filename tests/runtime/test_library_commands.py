"""What the commands say about libonnxopt_ops: `onnxopt kernels --library` prints its path, and
the report of `optimize --target cuda` (text and JSON) names the library the output needs."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.runtime import RuntimeUnavailable, cuda_available, library, session


def test_kernels_library_prints_a_path_ort_registers(cli, tmp_path):
    code, out, err = cli("kernels", "--library")
    assert (code, err) == (0, "")
    path = out.strip()
    assert path == library.path() and path.endswith("libonnxopt_ops.so")
    options = ort.SessionOptions()
    options.register_custom_ops_library(path)  # RegisterCustomOps succeeds
    code, _, err = cli("kernels", "--library", "--json")
    assert (code, err) == (2, "onnxopt: error: --library takes no other option\n")


def test_the_optimize_report_names_the_library_the_output_needs(cli, models_dir, tmp_path):
    model = models_dir / "llama.dynamo.onnx"
    code, out, err = cli("optimize", model, "--target", "cuda", "-o", tmp_path / "cuda.onnx")
    assert code == 0, err
    assert ("runtime: the output needs libonnxopt_ops (register it with ONNX Runtime's "
            "register_custom_ops_library; `onnxopt kernels --library` prints its path)") in out
    code, out, err = cli("optimize", model, "--target", "cpu", "-o", tmp_path / "cpu.onnx")
    assert code == 0, err
    assert "runtime:" not in out


def test_the_json_selection_names_it_as_the_schema_says(models_dir):
    import jsonschema

    from onnxopt.commands import json_report

    schema = json_report.schema()
    selection = jsonschema.Draft202012Validator({"$defs": schema["$defs"],
                                                "$ref": "#/$defs/selection"})
    for target, want in (("cuda", ["libonnxopt_ops"]), ("cpu", None)):
        result = run_pipeline(str(models_dir / "llama.dynamo.onnx"),
                              OptimizeOptions(target=target))
        data = result.report.stages["select"].to_json()
        selection.validate(data)
        assert data.get("runtime_libraries") == want


@pytest.mark.skipif(cuda_available.unavailable_reason() is None, reason="CUDA is usable here")
def test_a_cuda_session_where_cuda_cannot_run_says_so_in_one_line(models_dir):
    reason = cuda_available.unavailable_reason(kernels=False)
    with pytest.raises(RuntimeUnavailable) as caught:
        session(str(models_dir / "gpt2.ts.onnx"), providers=["CUDAExecutionProvider"])
    assert str(caught.value) == f"CUDAExecutionProvider was asked for, but {reason}"
    assert "\n" not in str(caught.value)
