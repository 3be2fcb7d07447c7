"""Attention spellings beyond the shipped models: scale from the shape, Trilu and constant
causal masks, boolean masks through Where, scale on Q only, Div by a constant."""

from __future__ import annotations

import pytest

from onnxopt import normalize
from onnxopt.importer import import_model
from onnxopt.legality.target import run_target
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import fuse_and_settle, run_pipeline
from onnxopt.verification import verify_models

HEAD = "g (float[batch, 4, seq, 16] q, float[batch, 4, seq, 16] k, float[batch, 4, seq, 16] v"


def _attention_nodes(proto):
    model = import_model(proto)
    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    report = fuse_and_settle(model, options, run_target(options, model.opset))
    return [n for n in model.graph if n.op_type == "AttentionFused"], report


def _check(make_model, text, **expected):
    proto = make_model(text)
    nodes, report = _attention_nodes(proto)
    assert len(nodes) == 1, report.summary()
    for key, want in expected.items():
        got = nodes[0].attr(key)
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, key
    result = run_pipeline(proto, OptimizeOptions(target="cpu"))
    assert verify_models(proto, result.proto).ok


def test_scale_from_the_shape(make_model):
    _check(make_model, HEAD + """) => (float[batch, 4, seq, 16] o) {
        shape = Shape (q)
        last = Constant <value = int64 {3}> ()
        d = Gather (shape, last)
        df = Cast <to = 1> (d)
        root = Sqrt (df)
        kt = Transpose <perm = [0, 1, 3, 2]> (k)
        s = MatMul (q, kt)
        ss = Div (s, root)
        p = Softmax <axis = -1> (ss)
        o = MatMul (p, v)
    }""", scale=0.25, mask_kind="none")


def test_scale_on_q_only_and_div_by_constant(make_model):
    _check(make_model, HEAD + """) => (float[batch, 4, seq, 16] o) {
        c = Constant <value = float {2.0}> ()
        qs = Div (q, c)
        kt = Transpose <perm = [0, 1, 3, 2]> (k)
        s = MatMul (qs, kt)
        p = Softmax <axis = -1> (s)
        o = MatMul (p, v)
    }""", scale=0.5)


def test_causal_mask_from_trilu(make_model):
    _check(make_model, HEAD + """) => (float[batch, 4, seq, 16] o) {
        shape = Shape (q)
        two = Constant <value = int64[1] {2}> ()
        n = Gather (shape, two)
        square = Concat <axis = 0> (n, n)
        one = Constant <value = float[1] {1}> ()
        ones = Expand (one, square)
        upper = Trilu <upper = 1> (ones, one_i)
        one_i = Constant <value = int64 {1}> ()
        masked = Cast <to = 9> (upper)
        big = Constant <value = float {-10000}> ()
        zero = Constant <value = float {0}> ()
        m = Where (masked, big, zero)
        kt = Transpose <perm = [0, 1, 3, 2]> (k)
        s = MatMul (q, kt)
        c = Constant <value = float {0.25}> ()
        ss = Mul (s, c)
        a = Add (ss, m)
        p = Softmax <axis = -1> (a)
        o = MatMul (p, v)
    }""".replace("upper = Trilu <upper = 1> (ones, one_i)\n        one_i = Constant <value = int64 {1}> ()",
                 "one_i = Constant <value = int64 {1}> ()\n        upper = Trilu <upper = 1> (ones, one_i)"),
           causal=1, mask_kind="causal")


def test_boolean_mask_through_where_on_the_scores(make_model):
    _check(make_model, HEAD + """, bool[batch, 1, 1, seq] keep) => (float[batch, 4, seq, 16] o) {
        kt = Transpose <perm = [0, 1, 3, 2]> (k)
        s = MatMul (q, kt)
        c = Constant <value = float {0.25}> ()
        ss = Mul (s, c)
        neg = Constant <value = float {-3.4028234663852886e38}> ()
        a = Where (keep, ss, neg)
        p = Softmax <axis = -1> (a)
        o = MatMul (p, v)
    }""", scale=0.25)


def test_scale_on_q_before_the_head_split(make_model):
    """OPT: Q is scaled right after its projection, before Reshape/Transpose."""
    proto = make_model("""
    g (float[B, S, 64] x, float[B, 4, S, 16] k, float[B, 4, S, 16] v) => (float[B, 4, S, 16] o) {
        c = Constant <value = float {0.25}> ()
        q0 = Mul (x, c)
        shape = Constant <value = int64[4] {0, 0, 4, 16}> ()
        r = Reshape (q0, shape)
        q = Transpose <perm = [0, 2, 1, 3]> (r)
        kt = Transpose <perm = [0, 1, 3, 2]> (k)
        s = MatMul (q, kt)
        p = Softmax <axis = -1> (s)
        o = MatMul (p, v)
    }""")
    nodes, _ = _attention_nodes(proto)
    assert len(nodes) == 1 and nodes[0].attr("scale") == pytest.approx(0.25)
    result = run_pipeline(proto, OptimizeOptions(target="cpu"))
    assert verify_models(proto, result.proto).ok


def test_quick_gelu_is_silu_with_alpha(make_model):
    proto = make_model("""
    g (float[B, S, 64] x) => (float[B, S, 64] y) {
        a = Constant <value = float {1.702}> ()
        t = Mul (x, a)
        s = Sigmoid (t)
        y = Mul (x, s)
    }""")
    model = import_model(proto)
    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    fuse_and_settle(model, options, run_target(options, model.opset))
    (node,) = list(model.graph)
    assert node.op_type == "SiluFused" and node.attr("alpha") == pytest.approx(1.702)
    result = run_pipeline(proto, OptimizeOptions(target="cpu"))
    assert verify_models(proto, result.proto).ok


PACKED = """
g (float[batch, seq, 60] x) => (float[batch, seq, 60] y) <float[60, 180] w = {WEIGHTS},
        int64[5] split5 = {0, -1, 3, 4, 15}, int64[3] merged = {0, -1, 60},
        float scale = {0.2581989}> {
    qkv = MatMul (x, w)
    r = Reshape (qkv, split5)
    t = Transpose <perm = [2, 0, 3, 1, 4]> (r)
    HEADS
    qs = Mul (q, scale)
    kt = Transpose <perm = [0, 1, 3, 2]> (k)
    s = MatMul (qs, kt)
    p = Softmax <axis = -1> (s)
    o = MatMul (p, v)
    ot = Transpose <perm = [0, 2, 1, 3]> (o)
    y = Reshape (ot, merged)
}"""
GATHER = """i0 = Constant <value = int64 {0}> ()
    i1 = Constant <value = int64 {1}> ()
    i2 = Constant <value = int64 {2}> ()
    q = Gather <axis = 0> (t, i0)
    k = Gather <axis = 0> (t, i1)
    v = Gather <axis = 0> (t, i2)"""
SLICE = """z = Constant <value = int64[1] {0}> ()
    one = Constant <value = int64[1] {1}> ()
    two = Constant <value = int64[1] {2}> ()
    three = Constant <value = int64[1] {3}> ()
    q3 = Slice (t, z, one, z)
    k3 = Slice (t, one, two, z)
    v3 = Slice (t, two, three, z)
    q = Squeeze (q3, z)
    k = Squeeze (k3, z)
    v = Squeeze (v3, z)"""


@pytest.mark.parametrize("heads", [GATHER, SLICE], ids=["gather", "slice"])
def test_one_packed_projection_with_an_odd_head_size(make_model, heads):
    """A recognizer's packed QKV (paddle2onnx's spelling: one projection viewed as
    [B, S, 3, H, 15], the three picked by Gather or by Slice and Squeeze)."""
    weights = ", ".join(f"{((i * 37) % 101 - 50) / 500:g}" for i in range(60 * 180))
    text = PACKED.replace("WEIGHTS", weights).replace("HEADS", heads)
    _check(make_model, text, num_heads=4, scale=0.2581989, mask_kind="none")
