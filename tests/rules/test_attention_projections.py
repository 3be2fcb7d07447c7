"""Q/K/V projections absorbed into AttentionFused where legal."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt import normalize
from onnxopt.importer import import_model
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import fuse_and_settle, run_pipeline
from onnxopt.verification import verify_models


def _fuse(source):
    model = import_model(source)
    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    return model, fuse_and_settle(model, options)


@pytest.mark.parametrize("name", ["bert.ts", "bert.dynamo", "roberta.dynamo", "vit.ts"])
def test_projections_absorbed_in_encoder_models(models_dir, name):
    model, report = _fuse(str(models_dir / f"{name}.onnx"))
    assert report.count("attention_projections") == 2
    nodes = [n for n in model.graph if n.op_type == "AttentionFused"]
    assert len(nodes) == 2
    for n in nodes:
        assert n.attr("projections") == 1
        assert all(n.input(i).const is not None for i in (5, 6, 7))
        assert n.inputs[0] is n.inputs[1] is n.inputs[2]  # self-attention: one hidden state
    result = run_pipeline(str(models_dir / f"{name}.onnx"), OptimizeOptions(target="cpu"))
    assert verify_models(str(models_dir / f"{name}.onnx"), result.proto).ok


def test_a_projection_read_elsewhere_is_refused(models_dir):
    # T5's first layer reads the key projection again (for the relative position bias shape)
    _, report = _fuse(str(models_dir / "t5enc.ts.onnx"))
    refused = [r for r in report.regions
               if r.rule == "attention_projections" and r.status == "refused"]
    assert len(refused) == 1
    assert refused[0].detail.startswith(
        "%/model/encoder/block.0/layer.0/SelfAttention/k/MatMul_output_0 is also used by ")
    assert report.count("attention_projections") == 1


PROJECTED = """
g (float[B, S, 32] x) => (float[B, S, 32] y) {{
    wq = Constant <value = float[32, 32] {w}> ()
    wk = Constant <value = float[32, 32] {w2}> ()
    wv = Constant <value = float[32, 32] {w3}> ()
    bq = Constant <value = float[32] {b}> ()
    pq = MatMul (x, wq)
    q0 = Add (pq, bq)
    k0 = MatMul (x, wk)
    v0 = MatMul (x, wv)
    shape = Constant <value = int64[4] {{0, 0, 4, 8}}> ()
    rq = Reshape (q0, shape)
    rk = Reshape (k0, shape)
    rv = Reshape (v0, shape)
    q = Transpose <perm = [0, 2, 1, 3]> (rq)
    k = Transpose <perm = [0, 2, 3, 1]> (rk)
    v = Transpose <perm = [0, 2, 1, 3]> (rv)
    s = MatMul (q, k)
    c = Constant <value = float {{0.35}}> ()
    ss = Mul (s, c)
    p = Softmax <axis = -1> (ss)
    o = MatMul (p, v)
    t = Transpose <perm = [0, 2, 1, 3]> (o)
    merged = Constant <value = int64[3] {{0, 0, 32}}> ()
    y = Reshape (t, merged)
}}
"""


def _values(rng, n):
    return "{" + ", ".join(f"{x:.4f}" for x in rng.standard_normal(n) * 0.2) + "}"


def test_text_block_becomes_one_node_and_matches_reference(make_model):
    from onnxopt.ops.attention import reference

    rng = np.random.default_rng(1)
    proto = make_model(PROJECTED.format(w=_values(rng, 1024), w2=_values(rng, 1024),
                                        w3=_values(rng, 1024), b=_values(rng, 32)))
    model, _ = _fuse(proto)
    assert [n.op_type for n in model.graph] == ["AttentionFused"]
    (node,) = list(model.graph)
    assert node.input(8) is not None and node.input(9) is None
    x = rng.standard_normal((2, 5, 32)).astype(np.float32)
    inputs = [node.inputs[0].name] * 3
    weights = [node.input(i).const.numpy() for i in (5, 6, 7)]
    got = reference(x, x, x, None, None, *weights, node.input(8).const.numpy(),
                    **{name: node.attr(name) for name in node.attrs})
    import onnxruntime as ort

    (want,) = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert inputs == ["x", "x", "x"]
    result = run_pipeline(proto, OptimizeOptions(target="cpu"))
    assert verify_models(proto, result.proto).ok
