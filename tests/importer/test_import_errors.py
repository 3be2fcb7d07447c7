"""Bad input: one line on stderr, the right exit code, nothing written, nothing touched.

Every case runs ``onnxopt optimize`` in-process and checks the exact message,
the exit code (2 for a usage problem, 1 for a bad model), that no traceback
escapes, that the input's bytes are unchanged, and that the folder holds no
new file afterwards (no output, no temporary file).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

GOOD = "agraph (float[N] x) => (float[N] y) { y = Relu(x) }"


def _files(folder: Path) -> dict[str, bytes]:
    """Every entry under ``folder`` with its bytes, so new files and changed ones both show."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink()
                                         else b"<link or dir>")
            for p in sorted(folder.rglob("*"))}


def _graph_model(nodes, *, inputs=("x",), outputs=("y",), initializers=(), opset=18):
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N"]) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N"]) for n in outputs],
        list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _external_model(folder: Path, location: str, *, name: str = "m.onnx",
                    length: int | None = 64) -> Path:
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    w.external_data.add(key="offset", value="0")
    if length is not None:
        w.external_data.add(key="length", value=str(length))
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    path = folder / name
    onnx.save_model(m, path)
    return path


# --- each case: build the bad input in `d`, return (model path, message after "<path>: ", code)

def case_missing(d: Path, models: Path):
    return d / "nope.onnx", "no such file", 2


def case_empty(d: Path, models: Path):
    (d / "empty.onnx").write_bytes(b"")
    return d / "empty.onnx", "empty file, not an ONNX model", 1


def case_random_bytes(d: Path, models: Path):
    (d / "rand.onnx").write_bytes(random.Random(0).randbytes(4096))
    return d / "rand.onnx", "not an ONNX model (protobuf parse failed: ", 1


def case_text_file(d: Path, models: Path):
    (d / "notes.onnx").write_text("This is not a model.\nJust some notes.\n")
    return d / "notes.onnx", "not an ONNX model (protobuf parse failed: ", 1


def case_truncated(d: Path, models: Path):
    data = (models / "gpt2.ts.onnx").read_bytes()
    (d / "half.onnx").write_bytes(data[: len(data) // 2])
    return d / "half.onnx", "not an ONNX model (protobuf parse failed: ", 1


def case_no_graph(d: Path, models: Path):
    m = onnx.ModelProto()
    m.ir_version = 10
    (d / "nograph.onnx").write_bytes(m.SerializeToString())
    return d / "nograph.onnx", "not an ONNX model (no graph in the protobuf)", 1


def case_dangling_input(d: Path, models: Path):
    m = _graph_model([helper.make_node("Relu", ["zz"], ["t"], name="r1"),
                      helper.make_node("Relu", ["t"], ["y"], name="r2")])
    onnx.save_model(m, d / "dangling.onnx")
    return (d / "dangling.onnx",
            "node 'r1' reads 'zz', which nothing produces (dangling input)", 1)


def case_cycle(d: Path, models: Path):
    m = _graph_model([helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
                      helper.make_node("Relu", ["a"], ["b"], name="n2"),
                      helper.make_node("Relu", ["a"], ["y"], name="n3")])
    onnx.save_model(m, d / "cycle.onnx")
    return d / "cycle.onnx", "the graph has a cycle through node 'n1'", 1


def case_self_loop(d: Path, models: Path):
    m = _graph_model([helper.make_node("Add", ["x", "y"], ["y"], name="n1")])
    onnx.save_model(m, d / "loop.onnx")
    return d / "loop.onnx", "node 'n1' reads its own output 'y' (cycle)", 1


def case_duplicate_output(d: Path, models: Path):
    m = _graph_model([helper.make_node("Relu", ["x"], ["y"], name="n1"),
                      helper.make_node("Neg", ["x"], ["y"], name="n2")])
    onnx.save_model(m, d / "dup.onnx")
    return (d / "dup.onnx",
            "duplicate output name 'y' (produced by two nodes: 'n1' and 'n2')", 1)


def case_output_shadows_input(d: Path, models: Path):
    m = _graph_model([helper.make_node("Relu", ["x"], ["x"], name="n1"),
                      helper.make_node("Relu", ["x"], ["y"], name="n2")])
    onnx.save_model(m, d / "shadow.onnx")
    return d / "shadow.onnx", "node 'n1' reads its own output 'x' (cycle)", 1


def case_output_produced_by_nothing(d: Path, models: Path):
    m = _graph_model([helper.make_node("Relu", ["x"], ["y"], name="n1")], outputs=("y", "z"))
    onnx.save_model(m, d / "noout.onnx")
    return d / "noout.onnx", "graph output 'z' is produced by no node", 1


def _versioned(d: Path, name: str, ir: int = 10, opset: int = 18) -> Path:
    m = _graph_model([helper.make_node("Relu", ["x"], ["y"])], opset=opset)
    m.ir_version = ir
    onnx.save_model(m, d / name)
    return d / name


def case_ir_version_99(d: Path, models: Path):
    return (_versioned(d, "ir99.onnx", ir=99),
            (f"unsupported IR version 99 (newer than {onnx.IR_VERSION}, the newest this onnx "
            "knows)"), 1)


def case_opset_99(d: Path, models: Path):
    top = onnx.defs.onnx_opset_version()
    return (_versioned(d, "op99.onnx", opset=99),
            f"unsupported opset 99 (newer than {top}, the newest this onnx knows)", 1)


def case_external_missing(d: Path, models: Path):
    return (_external_model(d, "weights.bin"),
            "external data for tensor 'w' is missing: 'weights.bin' not found next to the model", 1)


def case_external_absolute(d: Path, models: Path):
    secret = d.parent / f"{d.name}-secret.bin"
    np.arange(16, dtype=np.float32).tofile(secret)
    return (_external_model(d, str(secret)),
            (f"external data for tensor 'w' uses an absolute path '{secret}'; refusing to read "
             "outside the model's folder"), 1)


def case_external_dotdot(d: Path, models: Path):
    (d / "sub").mkdir()
    np.arange(16, dtype=np.float32).tofile(d / "w.bin")
    return (_external_model(d / "sub", "../w.bin"),
            "external data for tensor 'w' points outside the model's folder ('../w.bin')", 1)


def case_external_dotdot_inside(d: Path, models: Path):
    np.arange(16, dtype=np.float32).tofile(d / "w.bin")
    return (_external_model(d, "sub/../w.bin"),
            "external data for tensor 'w' points outside the model's folder ('sub/../w.bin')", 1)


def case_external_symlink_out(d: Path, models: Path):
    (d / "sub").mkdir()
    np.arange(16, dtype=np.float32).tofile(d / "outside.bin")
    os.symlink(d / "outside.bin", d / "sub" / "link.bin")
    return (_external_model(d / "sub", "link.bin"),
            "external data for tensor 'w' is a symlink out of the model's folder ('link.bin')", 1)


def case_external_truncated(d: Path, models: Path):
    (d / "short.bin").write_bytes(b"\0" * 10)
    return (_external_model(d, "short.bin"),
            "external data for tensor 'w' is truncated: 'short.bin' has 10 bytes, needs 64", 1)


def case_external_truncated_no_length(d: Path, models: Path):
    (d / "short.bin").write_bytes(b"\0" * 10)
    return (_external_model(d, "short.bin", length=None),
            "external data for tensor 'w' is truncated: 'short.bin' has 10 bytes, needs 64", 1)


def case_external_wrong_length(d: Path, models: Path):
    np.arange(16, dtype=np.float32).tofile(d / "w.bin")
    return (_external_model(d, "w.bin", length=60),
            "external data for tensor 'w' has length 60, but its type and shape need 64 bytes", 1)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line(case, tmp_path, models_dir, cli):
    d = tmp_path / "work"
    d.mkdir()
    path, message, code = CASES[case](d, models_dir)
    before = _files(tmp_path)
    rc, _, err = cli("optimize", path)
    assert (rc, err.count("\n")) == (code, 1), err
    assert err.startswith(f"onnxopt: error: {path}: {message}"), err
    if not message.endswith(": "):
        assert err == f"onnxopt: error: {path}: {message}\n"
    assert "Traceback" not in err
    assert _files(tmp_path) == before  # input unchanged; no output, data or temp file


def test_external_data_of_a_model_given_as_a_proto(tmp_path):
    from onnxopt.errors import ModelError
    from onnxopt.importer import import_model

    proto = onnx.load(str(_external_model(tmp_path, "w.bin")), load_external_data=False)
    with pytest.raises(ModelError, match=r"^<model>: external data for tensor 'w' cannot be "
                       r"resolved: the model was given as bytes, not a path$"):
        import_model(proto)


def test_directory_is_a_usage_error(tmp_path, cli):
    (tmp_path / "dir.onnx").mkdir()
    rc, _, err = cli("optimize", tmp_path / "dir.onnx")
    assert rc == 2
    assert err == f"onnxopt: error: {tmp_path / 'dir.onnx'}: is a directory, not an ONNX file\n"
    assert "Traceback" not in err
    assert os.listdir(tmp_path) == ["dir.onnx"]


def test_ir_reports_a_bad_model_in_one_line(tmp_path, models_dir, cli):
    path, message, code = case_cycle(tmp_path, models_dir)
    rc, _, err = cli("ir", path)
    assert rc == code
    assert err == f"onnxopt: error: {path}: {message}\n"


def test_verify_reports_a_model_ort_refuses_in_one_line(tmp_path, models_dir, cli):
    path, _, _ = case_cycle(tmp_path, models_dir)
    rc, _, err = cli("verify", path, path)
    assert rc == 1
    assert err.startswith(f"onnxopt: error: {path}: ONNX Runtime cannot load it: ")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_debug_shows_the_traceback(tmp_path, models_dir, cli):
    path, message, code = case_dangling_input(tmp_path, models_dir)
    rc, _, err = cli("optimize", path, "--debug")
    assert rc == code
    assert "Traceback (most recent call last)" in err
    assert "topological_order" in err
    assert err.endswith(f"onnxopt: error: {path}: {message}\n")


# --- the output path -----------------------------------------------------------------------------

@pytest.fixture
def good(tmp_path, write_model) -> Path:
    return write_model(GOOD, "good.onnx")


def _refused(cli, tmp_path, good, output, message, *, code=2):
    before = _files(tmp_path)
    rc, _, err = cli("optimize", good, "-o", output)
    assert rc == code, err
    assert err == f"onnxopt: error: {output}: {message}\n"
    assert _files(tmp_path) == before


def test_output_equal_to_input(cli, tmp_path, good):
    _refused(cli, tmp_path, good, good, "output path is the input file; refusing to overwrite it")


def test_output_equal_to_input_spelled_differently(cli, tmp_path, good, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(cli, tmp_path, good, "./good.onnx",
             "output path is the input file; refusing to overwrite it")


def test_output_is_a_symlink_to_the_input(cli, tmp_path, good):
    os.symlink(good, tmp_path / "alias.onnx")
    _refused(cli, tmp_path, good, tmp_path / "alias.onnx",
             "output path is the input file; refusing to overwrite it")


def test_output_is_the_inputs_external_data(cli, tmp_path):
    np.arange(16, dtype=np.float32).tofile(tmp_path / "w.bin")
    model = _external_model(tmp_path, "w.bin")
    before = _files(tmp_path)
    rc, _, err = cli("optimize", model, "-o", tmp_path / "w.bin")
    assert rc == 2
    assert err == (f"onnxopt: error: {tmp_path / 'w.bin'}: output path is one of the input's "
                   "files (its external data); refusing to overwrite it\n")
    assert _files(tmp_path) == before


def test_output_folder_missing(cli, tmp_path, good):
    out = tmp_path / "nowhere" / "out.onnx"
    _refused(cli, tmp_path, good, out, f"output folder {tmp_path / 'nowhere'} does not exist")


def test_output_is_a_directory(cli, tmp_path, good):
    (tmp_path / "adir").mkdir()
    _refused(cli, tmp_path, good, tmp_path / "adir", "output path is a directory")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_output_on_a_read_only_filesystem(cli, tmp_path, good):
    out = "/proc/self/onnxopt-test.onnx"
    _refused(cli, tmp_path, good, out, "output folder is not writable")
    assert not os.path.exists(out)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_output_in_proc_root_fails_cleanly(cli, tmp_path, good):
    out = "/proc/onnxopt-test.onnx"
    before = _files(tmp_path)
    rc, _, err = cli("optimize", good, "-o", out)
    assert rc == 2
    assert err.startswith(f"onnxopt: error: {out}: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert not os.path.exists(out)
    assert _files(tmp_path) == before
