"""rstd_canonical: 1/√v is a Reciprocal, and d·(rstd·γ) is (d·rstd)·γ; refusals change nothing."""

from __future__ import annotations

import pytest

from onnxopt.normalize.rstd_canonical import rstd_canonical

HEAD = """
g (float[2, 3, 8] d, float[2, 3, 1] v) => (float[2, 3, 8] y{extra_out}) <float one = {{1.0}},
    float half = {{0.5}}, float[8] gamma = {{0.5, 1.5, 2, 1, 1, 1, 1, 3}}> {{
    std = Sqrt (v)
    {body}
}}
"""


def graph(body: str, extra_out: str = "") -> str:
    return HEAD.format(body=body, extra_out=extra_out)


def test_one_over_sqrt_is_a_reciprocal(check):
    result = check(graph("r = Div (one, std)\n y = Mul (d, r)"), rstd_canonical, opset=15)
    assert result.ops == ["Sqrt", "Reciprocal", "Mul"]
    assert result.node("Reciprocal").created_by == "rstd_canonical"


@pytest.mark.parametrize("body", [
    "r = Div (half, std)\n y = Mul (d, r)",    # not a reciprocal
    "r = Div (d, std)\n y = Identity (r)",     # the normalised value itself
    "e = Exp (v)\n r = Div (one, e)\n y = Mul (d, r)",  # not of a square root
])
def test_other_divisions_are_left_alone(check, body):
    assert check(graph(body), rstd_canonical, opset=15).unchanged


@pytest.mark.parametrize("inner, outer", [
    ("rg = Mul (r, gamma)", "y = Mul (d, rg)"),
    ("rg = Mul (gamma, r)", "y = Mul (rg, d)"),
])
def test_weight_moves_after_the_normalisation(check, inner, outer):
    body = f"r = Reciprocal (std)\n {inner}\n {outer}"
    result = check(graph(body), rstd_canonical, opset=15)
    assert result.changes == 1
    assert result.ops == ["Sqrt", "Reciprocal", "Mul", "Mul"]
    first, second = [n for n in result.model.graph if n.op_type == "Mul"]
    assert [v.name for v in first.inputs] == ["d", result.node("Reciprocal").output.name]
    assert second.inputs[0] is first.output and second.inputs[1].name == "gamma"
    assert second.output.name == "y"
    assert rstd_canonical(result.model).changed == 0


def test_div_form_and_weight_in_one_run(check):
    result = check(graph("r = Div (one, std)\n rg = Mul (r, gamma)\n y = Mul (d, rg)"),
                   rstd_canonical, opset=15)
    assert result.ops == ["Sqrt", "Reciprocal", "Mul", "Mul"]


@pytest.mark.parametrize("body, extra_out", [
    # r·γ read elsewhere: it is computed anyway
    ("r = Reciprocal (std)\n rg = Mul (r, gamma)\n y = Mul (d, rg)\n w = Abs (rg)",
     ", float[2, 3, 8] w"),
    # not a reciprocal square root
    ("r = Reciprocal (v)\n rg = Mul (r, gamma)\n y = Mul (d, rg)", ""),
    # the weight is computed, not a constant
    ("r = Reciprocal (std)\n g2 = Abs (d)\n rg = Mul (r, g2)\n y = Mul (d, rg)", ""),
])
def test_weight_product_left_alone(check, body, extra_out):
    assert check(graph(body, extra_out), rstd_canonical, opset=15).unchanged
