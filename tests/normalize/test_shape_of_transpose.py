"""read_before_transpose: sizes read off a Transpose are read off its input, through perm."""

from __future__ import annotations

import pytest

from onnxopt.normalize._common import live_ops
from onnxopt.normalize.shape_of_transpose import read_before_transpose


def _every_shape(model) -> int:
    return sum(read_before_transpose(graph, node) for graph, node in live_ops(model, "Shape"))


@pytest.mark.parametrize("attrs", ["", "<start = 1>", "<start = -2, end = -1>", "<end = 10>"])
def test_shape_of_a_transpose_reads_the_input_through_perm(check, attrs):
    result = check(f"""
    g (float[b, 3, s, 5] X) => (int64[?] Y, float[b, 5, s, 3] T) {{
      T = Transpose <perm = [0, 3, 2, 1]> (X)
      Y = Shape {attrs} (T)
    }}""", _every_shape, dim=4)
    assert result.changes == 1
    gather = next(n for n in result.model.graph if n.op_type == "Gather")
    assert gather.inputs[0].producer.inputs[0].name == "X"


def test_a_transpose_read_only_by_its_shape_goes(check):
    result = check("""
    g (float[b, 3, s] X) => (int64[3] Y) {
      T = Transpose <perm = [2, 0, 1]> (X)
      Y = Shape (T)
    }""", _every_shape)
    assert "Transpose" not in result.ops
