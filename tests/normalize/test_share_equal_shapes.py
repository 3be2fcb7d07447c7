"""Integer values whose contents shapes prove equal are computed once."""

from __future__ import annotations

import os

from onnxopt import normalize
from onnxopt.importer import import_model
from onnxopt.normalize.eliminate_dead_code import eliminate_dead_code
from onnxopt.normalize.shapes import infer_shapes
from onnxopt.normalize.share_equal_shapes import share_equal_shapes
from onnxopt.options import OptimizeOptions, PassUnit

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "models")


def _shared(model):
    infer_shapes(model)
    changes = share_equal_shapes(model).changed
    eliminate_dead_code(model)
    return changes


# Two Reshape targets, each computed from the shape of the tensor it reshapes (TorchScript's
# way), for x and for relu(x): the same [B, S, 64] both times.
TWO_TARGETS = """
g (float[B, S, 64] x, float[{other}, 64] w) => (float[B, S, 64] out) {{
    h = Relu (x)
    i0 = Constant <value = int64 {{0}}> ()
    i1 = Constant <value = int64 {{1}}> ()
    ax = Constant <value = int64[1] {{0}}> ()
    d = Constant <value = int64[1] {{64}}> ()
    sx = Shape (x)
    bx = Gather <axis = 0> (sx, i0)
    qx = Gather <axis = 0> (sx, i1)
    ubx = Unsqueeze (bx, ax)
    uqx = Unsqueeze (qx, ax)
    tx = Concat <axis = 0> (ubx, uqx, d)
    sh = Shape ({second})
    bh = Gather <axis = 0> (sh, i0)
    qh = Gather <axis = 0> (sh, i1)
    ubh = Unsqueeze (bh, ax)
    uqh = Unsqueeze (qh, ax)
    th = Concat <axis = 0> (ubh, uqh, d)
    y1 = Reshape (x, tx)
    y2 = Reshape (h, th)
    s = Add (y1, y2)
    y3 = Reshape (w, th)
    out = Add (s, y3)
}}
"""


def _shape_ops(result) -> int:
    return sum(1 for op in result.ops if op == "Shape")


def test_targets_computed_from_two_tensors_of_one_shape_are_one_value(check):
    text = TWO_TARGETS.format(other="B, S", second="h")
    result = check(text, _shared)
    assert result.changes >= 1
    assert _shape_ops(result) == 1
    reshapes = [n for n in result.model.graph if n.op_type == "Reshape"]
    assert len({id(n.input(1)) for n in reshapes}) == 1


def test_a_different_symbol_keeps_its_own_computation(check):
    # w's shape is [B, T, 64]: its second dim is not provably S.
    text = TWO_TARGETS.format(other="B, T", second="w").replace(
        "y3 = Reshape (w, th)", "y3 = Reshape (w, tx)")
    result = check(text, _shared)
    # The batch read from w's shape is x's batch (both B): shared; the T next to it is not.
    assert _shape_ops(result) == 2
    targets = {id(n.input(1)) for n in result.model.graph if n.op_type == "Reshape"}
    assert len(targets) == 2
    # Each target is now read straight from a Shape: the Gather/Concat chain rebuilt it.
    reshapes = [n for n in result.model.graph if n.op_type == "Reshape"]
    assert sorted({n.input(1).sym for n in reshapes}) == [("B", "S", 64), ("B", "T", 64)]
    assert "Concat" not in result.ops


def test_dims_nobody_named_are_not_taken_for_each_other(check):
    # Two inputs whose middle dim is unknown: each gets a symbol of its own (?N), never equal.
    text = """
    g (float[B, ?, 64] x, float[B, ?, 64] w) => (float[B, ?, 64] out) {
        sx = Shape (x)
        sw = Shape (w)
        y1 = Reshape (x, sw)
        y2 = Reshape (w, sx)
        out = Add (y1, y2)
    }
    """
    result = check(text, _shared, run=False)
    assert result.changes == 0
    assert _shape_ops(result) == 2


def test_a_repeated_value_that_is_a_graph_output_keeps_its_name(onnx_text):
    proto = onnx_text("""
    g (float[B, 8] x) => (int64[2] first, int64[2] second) {
        first = Shape (x)
        h = Relu (x)
        second = Shape (h)
    }
    """)
    model = import_model(proto)
    _shared(model)
    assert [v.name for v in model.graph.outputs] == ["first", "second"]


def test_gpt2_torchscript_computes_each_reshape_target_once():
    """The export computes (batch, seq, hidden) from every layer's hidden state; after
    normalization each shape is read once, and the pass is what did it."""
    path = os.path.join(MODELS, "gpt2.ts.onnx")
    # The linear layers' Gemms stay flattened (gemm_unflattened would drop their shape
    # arithmetic altogether), so what is left to share is the targets they rebuild.
    flattened = frozenset({PassUnit("gemm_unflattened")})
    shapes = {}
    for hold in (flattened, flattened | {PassUnit("share_equal_shapes")}):
        model = import_model(path)
        normalize.run(model, OptimizeOptions(hold_back=hold))
        shapes[hold] = [n for n in model.graph if n.op_type == "Shape"]
    shared = shapes[flattened]
    assert len(shared) == len({tuple(n.inputs[0].shape) for n in shared})
    assert len(shared) < len(shapes[flattened | {PassUnit("share_equal_shapes")}])
