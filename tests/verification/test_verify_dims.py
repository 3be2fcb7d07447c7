"""Generated inputs fit each dim's role: batch 1-2, sequence lengths 7/16/29, image sides from
the model's hints or 32/64; ``--shape`` pins an input (and its symbols, for every input that
shares them) or a symbol."""

from __future__ import annotations

import numpy as np
import pytest

import onnxopt
from onnxopt.errors import UsageError
from onnxopt.verification.dims import dim_roles, spatial_hints
from onnxopt.verification.inputs import make_inputs, size_sets, split_shapes

IMAGE = """
agraph (float[N, 3, height, width] x) => (float[N, 4, height, width] y)
    <float[4, 3, 3, 3] w = {RANDOM}> {
  y = Conv <pads = [1, 1, 1, 1]> (x, w)
}
"""


def _image(make_model, text=IMAGE):
    return make_model(text.replace("{RANDOM}", "{" + ", ".join(["0.1"] * 108) + "}"))


def test_an_image_model_gets_batch_1_2_and_sides_32_64(make_model):
    report = onnxopt.verify(_image(make_model), _image(make_model), runs=4)
    assert report.ok
    assert [r["x"] for r in report.runs] == [(1, 3, 32, 32), (2, 3, 64, 64), (1, 3, 64, 64),
                                             (2, 3, 32, 32)]


def test_unnamed_dims_get_roles_by_position(make_model):
    nchw = IMAGE.replace("float[N, 3, height, width] x", "float[?, 3, ?, ?] x").replace(
        "float[N, 4, height, width] y", "float[?, 4, ?, ?] y")
    assert sorted(dim_roles(_image(make_model, nchw)).items()) == [
        ("?x:0", "batch"), ("?x:2", "spatial"), ("?x:3", "spatial")]
    feeds = make_inputs(_image(make_model, nchw), size_sets(2)[1])
    assert feeds["x"].shape == (2, 3, 64, 64)
    nhwc = make_model("agraph (float[unk__57, ?, ?, 3] x) => (float[unk__57, ?, ?, 3] y) "
                      "{ y = Relu (x) }")
    assert sorted(set(dim_roles(nhwc).values())) == ["batch", "spatial"]
    assert make_inputs(nhwc, size_sets(1)[0])["x"].shape == (1, 32, 32, 3)


@pytest.mark.parametrize("dims, roles", [
    ("[batch_size, sequence_length]", ["batch", "other"]),
    ("[N, past_sequence_length]", ["batch", "other"]),
    ("[s0, s1]", ["batch", "other"]),  # torch.export's names: by position
    ("[n]", ["other"]),  # a rank-1 length named n is no batch
    ("[b, 3, h, w]", ["batch", "other", "spatial", "spatial"]),
])
def test_dim_roles_by_name_then_position(make_model, dims, roles):
    model = make_model(f"agraph (int64{dims} x) => (int64{dims} y) {{ y = Identity (x) }}")
    names = [d.dim_param or str(d.dim_value) for d in
             model.graph.input[0].type.tensor_type.shape.dim]
    found = dim_roles(model)
    assert [found.get(n, "other") for n in names] == roles


def _patch_model(make_model, rows: int, table: str = "1, {rows}, 8"):
    """A ViT-like front end: a 16x16 patch convolution whose patches must fill a position
    table of ``rows`` rows (only one image side runs)."""
    weights = ", ".join(["0.01"] * (8 * 3 * 16 * 16))
    values = ", ".join(["0.5"] * (rows * 8))
    return make_model(f"""
    agraph (float[batch, 3, height, width] x) => (float[batch, {rows}, 8] y)
        <float[8, 3, 16, 16] w = {{{weights}}}, float[{table.format(rows=rows)}] pos =
         {{{values}}}, int64[3] shape = {{0, 8, -1}}> {{
      patches = Conv <kernel_shape = [16, 16], strides = [16, 16]> (x, w)
      flat = Reshape (patches, shape)
      tokens = Transpose <perm = [0, 2, 1]> (flat)
      y = Add (tokens, pos)
    }}""")


def test_image_sides_come_from_the_models_position_table(make_model):
    model = _patch_model(make_model, 196)  # 14 x 14 patches of 16: 224
    assert spatial_hints(model) == (224,)
    assert spatial_hints(_patch_model(make_model, 7)) == ()  # 7, 6: no square
    report = onnxopt.verify(model, _patch_model(make_model, 196), runs=2)
    assert report.ok and [r["x"] for r in report.runs] == [(1, 3, 224, 224), (2, 3, 224, 224)]


def test_a_side_the_original_refuses_is_retried(make_model):
    """A table of 196 rows read as [196, 8] gives no hint: 32 and 64 fail in the original, and
    the retry finds 224."""
    model = _patch_model(make_model, 196, table="{rows}, 8")
    assert spatial_hints(model) == ()
    report = onnxopt.verify(model, _patch_model(make_model, 196, table="{rows}, 8"), runs=2)
    assert report.ok and {r["x"][2:] for r in report.runs} == {(224, 224)}


TEXT = """
agraph (int64[batch, seq] input_ids, int64[batch, seq] attention_mask)
    => (float[batch, seq] y) {
  ids = Cast <to = 1> (input_ids)
  mask = Cast <to = 1> (attention_mask)
  y = Mul (ids, mask)
}
"""


def test_pinning_an_input_pins_its_symbols_for_every_input(make_model):
    model = make_model(TEXT)
    pinned, overrides = split_shapes({"input_ids": (1, 64)}, model)
    assert pinned == {"input_ids": (1, 64)} and overrides == {"batch": 1, "seq": 64}
    report = onnxopt.verify(model, make_model(TEXT), runs=3, shapes={"input_ids": (1, 64)})
    assert {(r["input_ids"], r["attention_mask"]) for r in report.runs} == {((1, 64), (1, 64))}
    report = onnxopt.verify(model, make_model(TEXT), runs=2, shapes={"seq": (64,)})
    assert [r["attention_mask"] for r in report.runs] == [(1, 64), (2, 64)]


@pytest.mark.parametrize("shapes, message", [
    ({"input_ids": (1, 64), "attention_mask": (1, 32)},
     "--shape attention_mask: seq is 32 here but 64 by --shape input_ids"),
    ({"seq": (16,), "input_ids": (1, 64)},
     "--shape input_ids: seq is 64 here but 16 by --shape seq=16"),
    ({"input_ids": (1, 2, 3)}, "--shape input_ids: 3 dims given, the input has 2"),
    ({"seq": (1, 2)}, ("--shape seq: neither an input of the model nor one of its symbolic "
                      "dims (one size) (attention_mask, input_ids, batch, seq)")),
])
def test_contradicting_shapes_are_usage_errors(make_model, shapes, message):
    with pytest.raises(UsageError) as caught:
        split_shapes(shapes, make_model(TEXT))
    assert str(caught.value) == message


def test_a_shape_against_a_fixed_dim_is_a_usage_error(make_model):
    with pytest.raises(UsageError, match=r"^--shape x: dim 1 is 3 in the model, 4 given$"):
        split_shapes({"x": (1, 4, 32, 32)}, _image(make_model))


def _switching(proto):
    from onnxopt.select.bind import kernel_metadata
    from onnxopt.select.causal_blocks import causal_block_kernels

    (kernel,) = causal_block_kernels()
    for key, value in kernel_metadata(kernel).items():
        proto.graph.node[0].metadata_props.add(key=key, value=value)
    return proto


def test_a_pinned_sequence_skips_the_long_run_saying_so(make_model):
    report = onnxopt.verify(make_model(TEXT), _switching(make_model(TEXT)), runs=2,
                            shapes={"seq": (64,)})
    assert report.long_run_skipped == "--shape fixes its sequence dims (seq)"
    assert len(report.runs) == 2
    report = onnxopt.verify(make_model(TEXT), _switching(make_model(TEXT)), runs=2)
    assert report.long_run_skipped is None and report.runs[-1]["input_ids"] == (2, 300)


def test_masks_keep_their_padding(make_model):
    feeds = make_inputs(make_model(TEXT), size_sets(2)[1])
    mask = feeds["attention_mask"]
    assert mask.shape == (2, 16) and mask[0, 0] == 1 and mask[0, -1] == 0  # right padding
    assert mask[1, 0] == 0 and mask[1, -1] == 1  # left padding in the second row
    assert np.issubdtype(mask.dtype, np.integer)
