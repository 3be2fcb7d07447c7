"""cubic_factored: c1·x + c2·x³ becomes (x + (c2/c1)·x³)·c1; refusals change nothing."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.normalize.cubic_factored import cubic_factored

HEAD = """
g (float[2, 3, 8] x) => (float[2, 3, 8] y{extra_out}) <float k = {{0.7978845608}},
    float kc = {{0.0356774081}}, float three = {{3.0}}, float zero = {{0.0}}> {{
    {cube}
    {linear}
    {cubic}
    y = Add ({add_args})
    {extra}
}}
"""
CUBES = {
    "x_times_square": "sq = Mul (x, x)\n x3 = Mul (x, sq)",
    "square_times_x": "sq = Mul (x, x)\n x3 = Mul (sq, x)",
    "pow": "x3 = Pow (x, three)",
}


def graph(*, cube=CUBES["x_times_square"], linear="kx = Mul (k, x)", cubic="t = Mul (kc, x3)",
          add_args="kx, t", extra="", extra_out="") -> str:
    return HEAD.format(cube=cube, linear=linear, cubic=cubic, add_args=add_args, extra=extra,
                       extra_out=extra_out)


@pytest.mark.parametrize("cube", sorted(CUBES))
@pytest.mark.parametrize("add_args", ["kx, t", "t, kx"])
def test_linear_coefficient_is_factored_out(check, cube, add_args):
    result = check(graph(cube=CUBES[cube], add_args=add_args), cubic_factored, opset=15)
    assert result.changes == 1
    nodes = list(result.model.graph)
    term, inner, outer = nodes[-3:]
    assert (term.op_type, inner.op_type, outer.op_type) == ("Mul", "Add", "Mul")
    assert term.inputs[0].name == "x3"
    assert term.inputs[1].const.numpy().item() == pytest.approx(0.044715, rel=1e-6)
    assert term.inputs[1].const.dtype == "float32"
    assert [v.name for v in inner.inputs] == ["x", term.output.name]
    assert outer.inputs[0] is inner.output and outer.inputs[1].name == "k"
    assert outer.output.name == "y" and outer.created_by == "cubic_factored"
    assert cubic_factored(result.model).changed == 0


def test_cube_read_elsewhere_is_kept(check):
    text = graph(extra="w = Abs (x3)", extra_out=", float[2, 3, 8] w")
    result = check(text, cubic_factored, opset=15)
    assert result.changes == 1 and result.ops.count("Abs") == 1


@pytest.mark.parametrize("kwargs", [
    {"extra": "w = Abs (kx)", "extra_out": ", float[2, 3, 8] w"},   # the linear term read
    {"extra": "w = Abs (t)", "extra_out": ", float[2, 3, 8] w"},    # the cubic term read
    {"linear": "kx = Mul (zero, x)"},                               # nothing to factor out
    {"cube": "sq = Mul (x, x)\n x3 = Mul (sq, sq)"},                # x⁴, not x³
    {"cube": "x3 = Pow (x, k)"},                                    # not the third power
    {"linear": "kx = Mul (x, x)"},                                  # no constant coefficient
], ids=["linear_read", "cubic_read", "zero_coefficient", "fourth_power", "other_power",
        "not_scaled"])
def test_left_alone(check, kwargs):
    assert check(graph(**kwargs), cubic_factored, opset=15).unchanged


def test_ratio_rounds_once(check):
    result = check(graph(), cubic_factored, opset=15)
    (term,) = [n for n in result.model.graph if n.created_by == "cubic_factored"
               and n.op_type == "Mul" and n.inputs[0].name == "x3"]
    want = np.float32(np.float64(np.float32(0.0356774081)) / np.float64(np.float32(0.7978845608)))
    assert term.inputs[1].const.numpy().item() == want
