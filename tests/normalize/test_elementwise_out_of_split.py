"""Add/Mul on a split view move out past the merge back (Swin's shifted-window mask)."""

from __future__ import annotations

import numpy as np

from onnxopt.normalize.elementwise_out_of_split import elementwise_out_of_split, merged_axis
from onnxopt.normalize.merge_reshapes import merge_reshapes
from onnxopt.normalize.remove_noops import remove_noops
from onnxopt.normalize.shapes import infer_shapes

# Scores [3·B, 2, 4, 4] (B images of 3 windows), viewed as [B, 3, 2, 4, 4] to add a
# per-window mask [1, 3, 1, 4, 4] scaled first, then merged back.
WINDOWS = """
g (float[B, 3, 2, 4, 4] x) => (float[N, 2, 4, 4] y) {{
    flat = Constant <value = int64[4] {{-1, 2, 4, 4}}> ()
    s = Reshape (x, flat)
    split = Constant <value = int64[5] {{-1, 3, 2, 4, 4}}> ()
    v = Reshape <allowzero = 1> (s, split)
    c = Constant <value = float {{0.5}}> ()
    scaled = Mul (v, c)
    m = Constant <value = float[{mask_dims}] {{{mask}}}> ()
    masked = Add (scaled, m)
    merged = Reshape <allowzero = 1> (masked, flat)
    y = Softmax <axis = -1> (merged)
}}
"""


def _text(mask_shape):
    values = np.arange(int(np.prod(mask_shape)), dtype=np.float32) - 20
    return WINDOWS.format(mask_dims=", ".join(map(str, mask_shape)),
                          mask=", ".join(f"{v:g}" for v in values))


def _normalize(model):
    changes = 0
    while True:
        infer_shapes(model)
        n = (elementwise_out_of_split(model) + merge_reshapes(model) + remove_noops(model)).changed
        if not n:
            return changes
        changes += n


def test_a_per_window_mask_moves_out_tiled_over_the_batch(check):
    result = check(_text((1, 3, 1, 4, 4)), _normalize, dim=2)
    assert result.changes and "Tile" in result.ops
    assert result.ops.count("Reshape") == 1  # the split and the merge folded to one
    assert result.ops.index("Mul") > result.ops.index("Reshape")


def test_a_mask_of_ones_along_both_axes_and_a_full_one_are_only_reshaped(check):
    for shape in ((1, 1, 2, 4, 4), (2, 3, 1, 4, 4)):
        text = _text(shape).replace("float[B, 3, 2, 4, 4] x", "float[2, 3, 2, 4, 4] x")
        result = check(text, _normalize)
        assert result.changes and "Tile" not in result.ops


def test_a_mask_broadcast_along_the_second_axis_only_stays(check):
    text = _text((2, 1, 1, 4, 4)).replace("float[B, 3, 2, 4, 4] x", "float[2, 3, 2, 4, 4] x")
    result = check(text, elementwise_out_of_split)
    assert result.unchanged


def test_merged_axis_finds_the_pair():
    assert merged_axis(("b", 3, 2, 4, 4), ("3*b", 2, 4, 4)) == 0
    assert merged_axis((2, 3, 4), (2, 12)) == 1
    assert merged_axis((2, 3, 4), (6, 5)) is None
    assert merged_axis((2, None, 4), (2, 12)) is None
    assert merged_axis((None, 3, 4), (None, 4)) == 0  # the element count fixes it
    assert merged_axis((None, 3, "s"), (None, "s")) is None  # "s" may be 0 at run time


def test_a_computed_mask_of_static_shape_moves_out_through_a_reshape(check):
    """TorchScript builds Swin's mask from constants with ops that are not folded (folding
    would store a larger tensor): the mask is merged by a Reshape node."""
    text = _text((1, 3, 1, 4, 4)).replace(
        "masked = Add (scaled, m)", "mm = Sin (m)\n    masked = Add (scaled, mm)")
    result = check(text, _normalize, dim=2)
    assert result.changes and "Tile" in result.ops and "Sin" in result.ops
    reshapes = [n for n in result.model.graph if n.op_type == "Reshape"]
    assert sorted(r.inputs[0].producer.op_type if r.inputs[0].producer else "x"
                  for r in reshapes) == ["Sin", "x"]  # the mask's, and the scores' one
