"""shape_of_transpose: sizes read off a Transpose are read off its input, through perm."""

from __future__ import annotations

import pytest

from onnxopt.normalize.shape_of_transpose import shape_of_transpose


@pytest.mark.parametrize("attrs, start_end", [
    ("", None), ("<start = 1>", (1, None)), ("<start = -2, end = -1>", (-2, -1)),
    ("<end = 10>", (0, 10)),
])
def test_shape_of_a_transpose_reads_the_input_through_perm(check, attrs, start_end):
    result = check(f"""
    g (float[b, 3, s, 5] X) => (int64[?] Y, float[b, 5, s, 3] T) {{
      T = Transpose <perm = [0, 3, 2, 1]> (X)
      Y = Shape {attrs} (T)
    }}""", shape_of_transpose, dim=4)
    assert result.changes == 1
    gather = next(n for n in result.model.graph if n.op_type == "Gather")
    assert gather.inputs[0].producer.inputs[0].name == "X"


def test_a_transpose_read_only_by_its_shape_goes(check):
    result = check("""
    g (float[b, 3, s] X) => (int64[3] Y) {
      T = Transpose <perm = [2, 0, 1]> (X)
      Y = Shape (T)
    }""", shape_of_transpose)
    assert "Transpose" not in result.ops
