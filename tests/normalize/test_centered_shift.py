"""centered_shift: x·s + (β − mean(x)·s) becomes (x − mean(x))·s + β; refusals change nothing."""

from __future__ import annotations

import pytest

from onnxopt.normalize.centered_shift import centered_shift

FOLDED = """
g (float[2, 3, 8] x, float[2, 3, 8] s) => (float[2, 3, 8] y{extra_out}) <float[8] beta = {{0.1,
    -0.2, 0.3, 0, 0.5, 0.6, -0.7, 0.8}}> {{
    mean = ReduceMean <axes = [-1], keepdims = {keepdims}> ({mean_of})
    {scaled}
    {mean_scaled}
    bm = Sub (beta, mr)
    y = Add ({add_args})
    {extra}
}}
"""


def folded(*, scaled="xs = Mul (x, s)", mean_scaled="mr = Mul (mean, s)", add_args="xs, bm",
           keepdims=1, mean_of="x", extra="", extra_out="") -> str:
    return FOLDED.format(scaled=scaled, mean_scaled=mean_scaled, add_args=add_args,
                         keepdims=keepdims, mean_of=mean_of, extra=extra, extra_out=extra_out)


@pytest.mark.parametrize("scaled, mean_scaled, add_args", [
    ("xs = Mul (x, s)", "mr = Mul (mean, s)", "xs, bm"),
    ("xs = Mul (s, x)", "mr = Mul (s, mean)", "bm, xs"),
])
def test_shift_folded_into_the_bias_is_taken_out(check, scaled, mean_scaled, add_args):
    result = check(folded(scaled=scaled, mean_scaled=mean_scaled, add_args=add_args),
                   centered_shift, opset=15)
    assert result.changes == 1
    assert result.ops == ["ReduceMean", "Sub", "Mul", "Add"]
    sub, mul, add = list(result.model.graph)[1:]
    assert [v.name for v in sub.inputs] == ["x", "mean"]
    assert mul.inputs == (sub.output, result.model.graph.inputs[1])
    assert add.inputs[0] is mul.output and add.inputs[1].name == "beta"
    assert add.output.name == "y" and add.created_by == "centered_shift"
    assert centered_shift(result.model).changed == 0


@pytest.mark.parametrize("kwargs", [
    {"mean_scaled": "mr = Mul (mean, x)"},      # another scale on the mean
    {"mean_of": "s"},                           # the mean of something else
    {"extra": "w = Abs (mr)", "extra_out": ", float[2, 3, 8] w"},
    {"extra": "w = Abs (xs)", "extra_out": ", float[2, 3, 8] w"},
    {"extra": "w = Abs (bm)", "extra_out": ", float[2, 3, 8] w"},
], ids=["other_scale", "other_mean", "mr_read", "xs_read", "bm_read"])
def test_left_alone(check, kwargs):
    assert check(folded(**kwargs), centered_shift, opset=15).unchanged


def test_computed_bias_is_left_alone(check):
    text = folded().replace("(float[2, 3, 8] x, float[2, 3, 8] s)",
                            "(float[2, 3, 8] x, float[2, 3, 8] s, float[8] b)").replace(
        "Sub (beta, mr)", "Sub (b, mr)")
    assert check(text, centered_shift, opset=15).unchanged


def test_mean_dropping_its_axis_is_left_alone(check):
    text = folded(keepdims=0).replace("float[2, 3, 8] s", "float[8] s")
    assert check(text, centered_shift, opset=15, run=False).unchanged
