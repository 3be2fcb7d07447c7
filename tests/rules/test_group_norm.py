"""group_norm and group_norm_silu: both PyTorch exporters' GroupNorm (instance norm over a
grouped view), ONNX GroupNormalization (opsets 18 and 21), the SiLU after it; each refusal
names what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.rules.group_norm import GroupNorm, GroupNormOp, GroupNormSilu
from onnxopt.rules.silu import Silu

RULES = [GroupNormOp(), GroupNorm(), GroupNormSilu(), Silu()]
CONSTS = ("int64[3] split = {0, 4, -1}, float[4] one = {1, 1, 1, 1}, "
          "float[4] zero = {0, 0, 0, 0}, "
          "float[8, 1, 1] gamma = {0.5, 1.5, 2, 1, -1, 1, 0.25, 3}, "
          "float[8, 1, 1] beta = {0.1, 0, -0.2, 0.3, 0, 0, 1, -1}")


def instance_form(*, x="float[n, 8, h, w] x", split="split", scale="one", bias="zero",
                  merge="shape = Shape (x)\n    back = Reshape (inorm, shape)",
                  tail="m = Mul (back, gamma)\n    y = Add (m, beta)", consts=CONSTS,
                  out="float[n, 8, h, w] y", split_attrs="") -> str:
    return f"""
g ({x}) => ({out}) <{consts}> {{
    grouped = Reshape {split_attrs}(x, {split})
    inorm = InstanceNormalization <epsilon = 0.000001> (grouped, {scale}, {bias})
    {merge}
    {tail}
}}
"""


def _one(fused):
    (node,) = fused.nodes("GroupNormFused")
    return node


def _vector(value) -> list[float]:
    return [float(v) for v in value.const.numpy().reshape(-1)]


def test_pytorch_spelling_fuses_with_per_channel_weights(fuse_text, optimize_text):
    text = instance_form()
    node = _one(fuse_text(text, RULES))
    assert node.attr("groups") == 4 and node.attr("epsilon") == pytest.approx(1e-6)
    assert _vector(node.inputs[1]) == [0.5, 1.5, 2, 1, -1, 1, 0.25, 3]
    assert _vector(node.inputs[2]) == pytest.approx([0.1, 0, -0.2, 0.3, 0, 0, 1, -1])
    result, report = optimize_text(text)
    assert result.report.stages["fuse"].count("group_norm") == 1
    assert report.ok, report.to_json()


def test_instance_norm_scale_and_bias_per_group_fold_into_the_weights(fuse_text, optimize_text):
    consts = CONSTS + ", float[4] s = {2, 1, 0.5, -1}, float[4] b = {0, 1, 0, -2}"
    text = instance_form(scale="s", bias="b", consts=consts)
    node = _one(fuse_text(text, RULES))
    gamma = np.array([0.5, 1.5, 2, 1, -1, 1, 0.25, 3])
    np.testing.assert_allclose(_vector(node.inputs[1]), gamma * np.repeat([2, 1, 0.5, -1], 2))
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


@pytest.mark.parametrize("tail, inputs", [
    ("y = Mul (back, gamma)", 2),            # all-zeros bias removed by normalization
    ("y = Identity (back)", 1),             # nn.GroupNorm(affine=False), or both removed
])
def test_norm_ends_at_its_weight_or_at_the_reshape_back(fuse_text, optimize_text, tail, inputs):
    text = instance_form(tail=tail)
    assert len(_one(fuse_text(text, RULES)).inputs) == inputs
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


@pytest.mark.parametrize("split", ["split", "split5"])
def test_a_one_dimensional_input_and_a_five_dimensional_split_fuse(fuse_text, optimize_text, split):
    consts = CONSTS.replace("float[8, 1, 1] gamma", "float[8, 1] gamma").replace(
        "float[8, 1, 1] beta", "float[8, 1] beta") + ", int64[4] split5 = {0, 4, 2, -1}"
    text = instance_form(x="float[n, 8, 7] x", out="float[n, 8, 7] y", consts=consts, split=split)
    assert _one(fuse_text(text, RULES)).attr("groups") == 4
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


def test_a_norm_whose_output_is_another_view_of_its_input_fuses_on_that_view(
        fuse_text, optimize_text):
    """A VAE's attention block: the reshape back to [N, C, H, W] and the next view to
    [N, C, H·W] fold into one Reshape, so the norm's output is a 3-D view of x."""
    consts = CONSTS.replace("float[8, 1, 1]", "float[8, 1]") + ", int64[3] view = {0, 8, -1}"
    text = instance_form(x="float[n, 8, 4, 5] x", out="float[n, 8, 20] y", consts=consts,
                         merge="back = Reshape (inorm, view)")
    fused = fuse_text(text, RULES)
    node = _one(fused)
    assert node.inputs[0].producer.op_type == "Reshape" and node.outputs[0].shape[2] == 20
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


@pytest.mark.parametrize("opset, scale", [
    (18, "float[4] s = {2, 1, 0.5, -1}, float[4] b = {0, 1, 0, -2}"),            # per group
    (21, "float[8] s = {2, 1, 0.5, -1, 1, 1, 3, 1}, float[8] b = {0, 1, 0, -2, 0, 0, 1, 1}"),
])
def test_onnx_group_normalization_fuses_per_channel(fuse_text, optimize_text, opset, scale):
    text = f"""
g (float[n, 8, h, w] x) => (float[n, 8, h, w] y) <{scale}> {{
    y = GroupNormalization <num_groups = 4, epsilon = 0.00001> (x, s, b)
}}
"""
    node = _one(fuse_text(text, RULES, opset=opset))
    assert len(_vector(node.inputs[1])) == 8
    result, report = optimize_text(text, opset=opset)
    assert "GroupNormalization" not in result.report.nodes_after
    assert report.ok, report.to_json()


def test_the_silu_after_the_norm_is_taken_in(fuse_text, optimize_text):
    text = instance_form(tail="m = Mul (back, gamma)\n    a = Add (m, beta)\n"
                              "    sg = Sigmoid (a)\n    y = Mul (a, sg)")
    fused = fuse_text(text, RULES)
    assert _one(fused).attr("activation") == "silu" and not fused.nodes("SiluFused")
    assert fused.report.count("group_norm_silu") == 1
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


def test_a_norm_read_by_the_silu_and_elsewhere_keeps_the_silu_apart(fuse_text):
    text = instance_form(out="float[n, 8, h, w] y, float[n, 8, h, w] a",
                         tail="m = Mul (back, gamma)\n    a = Add (m, beta)\n"
                              "    sg = Sigmoid (a)\n    y = Mul (a, sg)")
    fused = fuse_text(text, RULES)
    assert _one(fused).attr("activation", "") == "" and len(fused.nodes("SiluFused")) == 1


def test_quick_gelu_after_the_norm_is_not_silu(fuse_text):
    text = instance_form(consts=CONSTS + ", float k = {1.702}",
                         tail="m = Mul (back, gamma)\n    a = Add (m, beta)\n    ka = Mul (a, k)\n"
                              "    sg = Sigmoid (ka)\n    y = Mul (a, sg)")
    fused = fuse_text(text, RULES)
    assert _one(fused).attr("activation", "") == ""
    assert fused.nodes("SiluFused")[0].attr("alpha") == pytest.approx(1.702)


@pytest.mark.parametrize("change, reason, code", [
    ({"x": "float[n, c, h, w] x", "out": "float[n, c, h, w] y"},
     "%x: the channel dimension is c, not a known size", "size_not_static"),
    ({"consts": CONSTS.replace("{0, 4, -1}", "{0, 3, -1}").replace(
        "float[4] one = {1, 1, 1, 1}", "float[3] one = {1, 1, 1}").replace(
        "float[4] zero = {0, 0, 0, 0}", "float[3] zero = {0, 0, 0}")},
     "%x: 8 channels do not split into 3 groups", "groups_do_not_divide"),
    ({"x": "float[n, 2000000, 3] x", "out": "float[n, 2000000, 3] y", "tail": "y = Identity (back)"},
     "%x: 2000000 channels, more than the 1048576 whose weights onnxopt folds",
     "too_many_channels"),
    ({"split_attrs": "<allowzero = 1> "},
     "the split Reshape has allowzero=1 and a 0 in its target [0, 4, -1]", "split_allowzero"),
    ({"merge": "back = Reshape (inorm, flat)", "out": "float[n, 64] y",
      "consts": CONSTS + ", int64[2] flat = {0, -1}", "tail": "y = Identity (back)"},
     "its target [0, -1] does not keep the batch and the 8 channels", "merge_changes_view"),
])
def test_refusals_name_the_reason(fuse_text, change, reason, code):
    fused = fuse_text(instance_form(**change), RULES)
    assert not fused.nodes("GroupNormFused")
    assert any(reason in r for r in fused.reasons("group_norm")), fused.report.summary()
    assert code in fused.codes("group_norm"), fused.report.summary()


def test_a_weight_that_is_not_per_channel_stays_outside_the_norm(fuse_text, optimize_text):
    consts = CONSTS + ", float[1, 1, 1, 5] wide = {1, 2, 3, 4, 5}"
    text = instance_form(x="float[n, 8, 3, 5] x", out="float[n, 8, 3, 5] y", consts=consts,
                         tail="y = Mul (back, wide)")
    fused = fuse_text(text, RULES)
    node = _one(fused)
    assert len(node.inputs) == 1 and node.outputs[0].uses()[0][0].op_type == "Mul"
    _result, report = optimize_text(text)
    assert report.ok, report.to_json()


@pytest.mark.parametrize("name", ["diffusion.ts", "diffusion.dynamo"])
def test_every_group_norm_of_the_diffusion_exports_fuses(fused_model, optimized_model, name):
    fused = fused_model(name)
    assert fused.report.count("group_norm") == 6, fused.report.summary()
    assert fused.report.count("group_norm_silu") == 5
    assert fused.report.count("group_norm", "refused") == 0
    assert not fused.ops["InstanceNormalization"] and not fused.ops["Sigmoid"]
    _result, report = optimized_model(name)
    assert report.ok, report.to_json()
