"""The writer's temporary files: made empty, written without being truncated, and never
left behind by a failed write or an interruption."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxopt.errors import UsageError
from onnxopt.exporter import save


def _model(size: int) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.arange(size, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])],
                              [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def opened_flags(monkeypatch):
    """The flags of every file the writer opens (``os.open``'s, or what ``open``'s mode means)."""
    flags: list[int] = []
    real = os.open

    def spy(path, flag, *args, **kwargs):
        flags.append(flag)
        return real(path, flag, *args, **kwargs)

    def open_spy(file, mode="r", *args, **kwargs):  # open(): "w" truncates, "x" does not
        if "w" in mode:
            flags.append(os.O_WRONLY | os.O_TRUNC)
        return open(file, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    monkeypatch.setattr(save, "open", open_spy, raising=False)
    return flags


@pytest.mark.parametrize("how", ["staged", "inline", "external"])
def test_no_file_is_truncated_as_it_is_opened(tmp_path, opened_flags, how):
    """A file truncated to nothing is written out to disk as it is closed on ext4 (its
    ``auto_da_alloc``): 45 ms of the 24-layer GPT-2's output. The temporary file is new and
    empty, so it is opened as it is; what is written is the model all the same."""
    model = _model(4096)
    path = str(tmp_path / "m.onnx")
    if how == "staged":
        save.stage_bytes([model.SerializeToString()], path).commit()
    else:
        save.save_model(model, {}, path, use_external=how == "external")
    written = [f for f in opened_flags if f & (os.O_WRONLY | os.O_RDWR)]
    assert written and not any(f & os.O_TRUNC for f in written)
    assert onnx.load(path) == model if how != "external" else (
        numpy_helper.to_array(onnx.load(path).graph.initializer[0]).tolist()
        == list(range(4096)))
    assert sorted(os.listdir(tmp_path)) == (["m.onnx"] if how != "external"
                                            else ["m.onnx", "m.onnx.data"])


# ------------------------------------------------- failures and interruptions leave nothing


def _external(tmp_path):
    """A model whose weight goes to a data file (save_model with use_external)."""
    return _model(4096), str(tmp_path / "m.onnx")


def test_a_full_disk_while_the_data_file_is_written_leaves_nothing(tmp_path, monkeypatch):
    """The data file's temporary was made outside the ``try`` that removes it: a full disk
    (ENOSPC) left a partial temporary data file of any size behind."""
    real = save._write_data_file

    def fill_then_fail(tensors, external, f, location, move_large):
        real(tensors, external, f, location, move_large)
        f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(save, "_write_data_file", fill_then_fail)
    model, path = _external(tmp_path)
    with pytest.raises(UsageError, match="cannot write output: No space left on device"):
        save.save_model(model, {}, path, use_external=True)
    assert os.listdir(tmp_path) == []
    assert save._temporaries == {}


@pytest.mark.parametrize("error", [PermissionError(errno.EACCES, "Permission denied"),
                                   KeyboardInterrupt()])
def test_a_model_file_that_cannot_be_written_leaves_nothing(tmp_path, monkeypatch, error):
    """After the data file was written, the model's own temporary fails (or Ctrl-C lands):
    neither temporary remains, and nothing is put in place."""
    def refuse(fd, pieces):
        raise error

    monkeypatch.setattr(save, "write_pieces", refuse)
    model, path = _external(tmp_path)
    with pytest.raises((UsageError, KeyboardInterrupt)):
        save.save_model(model, {}, path, use_external=True)
    assert os.listdir(tmp_path) == []


def test_staged_bytes_interrupted_leave_nothing(tmp_path, monkeypatch):
    def interrupted(fd, pieces):
        raise KeyboardInterrupt

    monkeypatch.setattr(save, "write_pieces", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save.stage_bytes([b"model bytes"], str(tmp_path / "m.onnx"))
    assert os.listdir(tmp_path) == []


def test_write_atomically_keeps_the_old_file_when_the_writer_fails(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("the old report")

    def half(f):
        f.write(b"half a rep")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(UsageError, match="cannot write: No space left on device"):
        save.write_atomically(str(path), half)
    assert os.listdir(tmp_path) == ["r.json"] and path.read_text() == "the old report"
    save.write_atomically(str(path), lambda f: f.write(b"the new report"))
    assert os.listdir(tmp_path) == ["r.json"] and path.read_text() == "the new report"


def test_what_an_interruption_left_between_two_steps_is_removed(tmp_path):
    """A temporary that was made but whose owner never began (an interruption between the
    two) is listed, and remove_temporaries removes it; one put in place is not touched."""
    left = save._temp_beside(str(tmp_path / "a.onnx"))
    assert left in save._temporaries
    trial = save.TrialFolder(str(tmp_path / "b.onnx"))
    (Path(trial.path)).write_bytes(b"unfinished")
    kept = save.stage_bytes([b"kept"], str(tmp_path / "c.onnx"))
    kept.commit()
    assert len(os.listdir(tmp_path)) == 3
    save.remove_temporaries()
    assert os.listdir(tmp_path) == ["c.onnx"] and save._temporaries == {}


def test_a_trial_folder_puts_the_data_file_then_the_model_in_place(tmp_path, monkeypatch):
    model, path = _external(tmp_path)
    trial = save.TrialFolder(path)
    save.save_model(model, {}, trial.path, use_external=True)
    assert sorted(os.listdir(trial.folder)) == ["m.onnx", "m.onnx.data"]
    moved = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (moved.append(os.path.basename(b)),
                                                     real(a, b)))
    trial.commit()
    assert moved == ["m.onnx.data", "m.onnx"]
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
    assert numpy_helper.to_array(onnx.load(path).graph.initializer[0]).tolist() == list(
        range(4096))
