"""The exporter names the dims ONNX Runtime's inference cannot: outputs of ops whose shape
comes from an input's values (exporter/shape_from_values.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxopt.evaluation import session


def _unnamed_in_ort(model: onnx.ModelProto) -> list[str]:
    """The node outputs whose shape ONNX Runtime's own inference leaves with an unnamed dim
    (every value made a graph output, typed by ORT, optimizations off)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    produced = [o for n in probe.graph.node for o in n.output if o]
    listed = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=o) for o in produced if o not in listed)
    sess = session(probe.SerializeToString(), optimize=False)
    return [o.name for o in sess.get_outputs() if o.name in set(produced)
            and (o.shape is None or any(d is None for d in o.shape))]


def _optimized(cli, tmp_path, source) -> onnx.ModelProto:
    out = tmp_path / "out.onnx"
    code, _, err = cli("optimize", source, "-o", out, "--target", "cpu", "-q")
    assert code == 0, err
    return onnx.load(str(out))


def test_position_ids_of_a_real_export_keep_the_sequence_dim(models_dir, tmp_path, cli):
    """TorchScript GPT-2: ``Range(0, Gather(Shape(ids), 1))`` is ``[seq]`` in the file (and the
    mask's ``Range`` over the batch ``[batch]``), and ORT then knows the dims all the way down;
    the input model leaves 100+ values unnamed."""
    source = models_dir / "gpt2.ts.onnx"
    out = _optimized(cli, tmp_path, source)
    ranges = {n.output[0] for n in out.graph.node if n.op_type == "Range"}
    declared = {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
                for vi in out.graph.value_info}
    assert sorted(declared[r][0] for r in ranges) == ["batch", "seq"]
    assert len(_unnamed_in_ort(onnx.load(str(source)))) > 100
    assert len(_unnamed_in_ort(out)) <= 1


@pytest.mark.parametrize("model_name", ["bert.ts.onnx", "vit.ts.onnx", "swin.ts.onnx"])
def test_encoders_come_out_with_every_dim_named(models_dir, tmp_path, cli, model_name):
    out = _optimized(cli, tmp_path, models_dir / model_name)
    assert len(_unnamed_in_ort(out)) <= 1


RANGE_OF_SHAPE = """
agraph (float[N, 8] x) => (float[N, 8] y) {
    shape = Shape <start = 0, end = 1> (x)
    zero = Constant <value = int64[1] {0}> ()
    n = Squeeze (shape, zero)
    lo = Constant <value = int64 {0}> ()
    one = Constant <value = int64 {1}> ()
    idx = Range (lo, n, one)
    ids = Cast <to = 1> (idx)
    col = Unsqueeze (ids, one)
    y = Add (x, col)
}
"""

RANGE_OF_DATA = """
agraph (float[N, 8] x, int64 n) => (float[M] y) {
    lo = Constant <value = int64 {0}> ()
    one = Constant <value = int64 {1}> ()
    idx = Range (lo, n, one)
    y = Cast <to = 1> (idx)
}
"""


def _through_the_pipeline(cli, tmp_path, write_model, text: str) -> onnx.ModelProto:
    return _optimized(cli, tmp_path, write_model(text))


def _declared(model: onnx.ModelProto) -> dict[str, list]:
    return {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in model.graph.value_info}


def test_a_range_over_a_shape_is_written_with_its_symbol(cli, tmp_path, write_model):
    out = _through_the_pipeline(cli, tmp_path, write_model, RANGE_OF_SHAPE)
    assert _declared(out).get("idx") == ["N"]
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    (y,) = session(out.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(y, x + np.arange(5, dtype=np.float32)[:, None])


def test_a_range_over_data_is_not_named(cli, tmp_path, write_model):
    """Its length is a value's contents: inference's own symbol (``?N``) is never written."""
    out = _through_the_pipeline(cli, tmp_path, write_model, RANGE_OF_DATA)
    assert "idx" not in _declared(out)


def test_ops_whose_shape_follows_shapes_get_no_value_info(cli, tmp_path, write_model):
    """``Cast``: ORT infers it from its input's shape; nothing is claimed (``Unsqueeze``
    reads its axes from an input, so it is named)."""
    declared = _declared(_through_the_pipeline(cli, tmp_path, write_model, RANGE_OF_SHAPE))
    assert "ids" not in declared
    assert declared["col"] == ["N", 1]
