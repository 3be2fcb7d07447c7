"""centered_variance: max(0, E[x²] − E[x]²) becomes E[(x − E[x])²]; every refusal changes
nothing."""

from __future__ import annotations

import pytest

from onnxopt.normalize.centered_variance import centered_variance

ONE_PASS = """
g (float[2, 3, 8] x) => (float[2, 3, 1] v, float[2, 3, 8] y{extra_out}) <float zero = {{{zero}}},
    float two = {{2.0}}> {{
    mean = ReduceMean <axes = [-1]> (x)
    {square}
    msq = ReduceMean <axes = {sq_axes}, keepdims = {keepdims}> (xx)
    {mean_square}
    diff = Sub (msq, m2)
    v = Max ({max_args})
    y = Sub (x, mean)
    {extra}
}}
"""


def one_pass(*, zero="0.0", square="xx = Mul (x, x)", mean_square="m2 = Mul (mean, mean)",
             max_args="diff, zero", sq_axes="[-1]", keepdims=1, extra="", extra_out="") -> str:
    return ONE_PASS.format(zero=zero, square=square, mean_square=mean_square, max_args=max_args,
                           sq_axes=sq_axes, keepdims=keepdims, extra=extra, extra_out=extra_out)


@pytest.mark.parametrize("square, mean_square, max_args", [
    ("xx = Mul (x, x)", "m2 = Mul (mean, mean)", "diff, zero"),
    ("xx = Pow (x, two)", "m2 = Pow (mean, two)", "zero, diff"),
    ("xx = Mul (x, x)", "m2 = Pow (mean, two)", "zero, diff"),
])
def test_one_pass_variance_becomes_centred(check, square, mean_square, max_args):
    result = check(one_pass(square=square, mean_square=mean_square, max_args=max_args),
                   centered_variance, opset=15)
    assert result.changes == 1
    assert result.ops == ["ReduceMean", "Sub", "Mul", "ReduceMean", "Sub"]
    sub, mul, var = list(result.model.graph)[1:4]
    assert sub.inputs[0].name == "x" and sub.inputs[1].name == "mean"
    assert mul.inputs == (sub.output, sub.output) and var.inputs[0] is mul.output
    assert var.sem["axes"] == (2,) and var.sem["keepdims"] is True
    assert var.created_by == "centered_variance"
    assert [v.name for v in result.model.graph.outputs] == ["v", "y"]


def test_opset_18_axes_input(check):
    text = one_pass().replace("ReduceMean <axes = [-1]> (x)", "ReduceMean (x, ax)").replace(
        "ReduceMean <axes = [-1], keepdims = 1> (xx)", "ReduceMean <keepdims = 1> (xx, ax)"
    ).replace("float two = {2.0}", "float two = {2.0}, int64[1] ax = {-1}")
    result = check(text, centered_variance, opset=18)
    assert result.changes == 1 and result.ops.count("Max") == 0


def test_runs_again_to_nothing(check):
    result = check(one_pass(), centered_variance, opset=15)
    assert centered_variance(result.model).changed == 0


# --- left alone -------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {"zero": "0.001"},                                   # a clamp at another value
    {"sq_axes": "[1]"},                                  # reductions over different axes
    {"keepdims": 0, "max_args": "diff, zero"},           # E[x²] drops its axis
    {"mean_square": "m2 = Mul (mean, x)"},               # not E[x]²
    {"square": "xx = Mul (x, y)"},                       # not x², and not before its reader
], ids=["nonzero_clamp", "different_axes", "keepdims_0", "not_mean_squared", "not_x_squared"])
def test_not_the_one_pass_variance(check, kwargs):
    text = one_pass(**kwargs)
    run = "keepdims" not in kwargs  # E[x²] without its axis does not line up with E[x]²
    if "square" in kwargs:  # y must exist before x·y reads it
        text = text.replace("    y = Sub (x, mean)\n", "").replace(
            "mean = ReduceMean <axes = [-1]> (x)", "mean = ReduceMean <axes = [-1]> (x)\n"
            "    y = Sub (x, mean)")
    assert check(text, centered_variance, opset=15, run=run).unchanged


@pytest.mark.parametrize("extra", ["w = Abs (msq)", "w = Abs (m2)", "w = Abs (diff)",
                                   "w = Abs (xx)"])
def test_intermediate_read_elsewhere(check, extra):
    shape = "[2, 3, 8]" if "xx" in extra else "[2, 3, 1]"
    text = one_pass(extra=extra, extra_out=f", float{shape} w")
    assert check(text, centered_variance, opset=15).unchanged


def test_zero_that_broadcasts_is_refused(check):
    text = one_pass().replace("float zero = {0.0}", "float[1, 1, 1, 1] zero = {0.0}").replace(
        "float[2, 3, 1] v", "float[1, 2, 3, 1] v")
    assert check(text, centered_variance, opset=15).unchanged


def test_mean_read_elsewhere_is_fine(check):
    """The mean is needed anyway (the norm centres x with it): only E[x²] and E[x]² must be
    private."""
    text = one_pass(extra="w = Abs (mean)", extra_out=", float[2, 3, 1] w")
    assert check(text, centered_variance, opset=15).changes == 1

