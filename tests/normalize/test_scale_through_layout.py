"""A scalar scale moves past Reshape/Transpose toward the MatMul that reads it."""

from __future__ import annotations

from onnxopt.normalize.scale_through_layout import scale_through_layout


def to_fixed_point(model) -> int:
    total = 0
    while changed := scale_through_layout(model).changed:
        total += changed
    return total


def ops(result) -> list[str]:
    return [n.op_type for n in result.model.graph]

SCALED_Q = """
g (float[B, S, 64] x, float[B, 4, 16, S] kt) => (float[B, 4, S, S] y) {
    c = Constant <value = float {0.125}> ()
    q0 = Mul (x, c)
    shape = Constant <value = int64[4] {0, 0, 4, 16}> ()
    r = Reshape (q0, shape)
    q = Transpose <perm = [0, 2, 1, 3]> (r)
    y = MatMul (q, kt)
}
"""


def test_scale_moves_past_reshape_and_transpose(check):
    result = check(SCALED_Q, to_fixed_point)
    assert result.changes == 2
    assert ops(result) == ["Reshape", "Transpose", "Mul", "MatMul"]


def test_scale_with_another_reader_stays(check):
    text = SCALED_Q.replace("=> (float[B, 4, S, S] y)", "=> (float[B, 4, S, S] y, float[B, S, 64] q0)")
    assert ops(check(text, to_fixed_point)) == ["Mul", "Reshape", "Transpose", "MatMul"]


def test_a_tensor_scale_stays(check):
    text = SCALED_Q.replace("c = Constant <value = float {0.125}> ()",
                            "c = Constant <value = float[64] {" + ", ".join(["0.5"] * 64) + "}> ()")
    assert ops(check(text, to_fixed_point)) == ["Mul", "Reshape", "Transpose", "MatMul"]
