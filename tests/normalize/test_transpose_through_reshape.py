"""transpose_through_reshape: SDPA's transpose of K on a [B·H, S, D] view becomes one 4-D
transpose, proved on symbolic shapes or, where a dim is unknown, by the element count."""

from __future__ import annotations

from onnxopt.normalize.transpose_through_reshape import transpose_through_reshape

T = transpose_through_reshape
CHAIN = """
g (float[{b}, 2, 6, 4] K) => (float[{b}, 2, 4, 6] Y) <int64[3] merge = {{{merge}}},
                                                       int64[4] split = {{{split}}}> {{
  flat = Reshape (K, merge)
  t = Transpose <perm = [0, 2, 1]> (flat)
  Y = Reshape (t, split)
}}"""


def test_a_transpose_on_the_merged_view_is_a_transpose_of_the_tensor(check):
    result = check(CHAIN.format(b="batch", merge="-1, 6, 4", split="-1, 2, 4, 6"), T)
    assert result.ops == ["Transpose"]
    assert result.node("Transpose").attr("perm") == (0, 1, 3, 2)


def test_an_unknown_batch_is_proved_by_the_element_count(check):
    """float16 conversions drop the batch symbol: the -1 targets with every other dim a
    number still fix the merged and split axes."""
    result = check(CHAIN.format(b="?", merge="-1, 6, 4", split="-1, 2, 4, 6"), T)
    assert result.ops == ["Transpose"]


def test_a_split_that_is_not_the_merged_prefix_stays(check):
    text = CHAIN.format(b="?", merge="-1, 6, 4", split="-1, 4, 2, 6").replace(
        "float[?, 2, 4, 6] Y", "float[?, 4, 2, 6] Y")
    assert check(text, T).unchanged


def test_a_merged_view_whose_size_is_also_read_still_folds(check):
    """BLOOM's TorchScript export reads the key length off the merged, transposed keys."""
    text = CHAIN.format(b="batch", merge="-1, 6, 4", split="-1, 2, 4, 6").replace(
        "=> (float[batch, 2, 4, 6] Y)", "=> (float[batch, 2, 4, 6] Y, int64[3] n)").replace(
        "  Y = Reshape (t, split)", "  Y = Reshape (t, split)\n  n = Shape (flat)")
    result = check(text, T)
    assert result.changes == 1 and "Transpose" in result.ops
    assert [n.op_type for n in result.model.graph if n.op_type == "Reshape"] == ["Reshape"]


def test_the_transposed_view_whose_size_is_read_folds_and_the_size_reads_the_keys(check):
    text = CHAIN.format(b="batch", merge="-1, 6, 4", split="-1, 2, 4, 6").replace(
        "=> (float[batch, 2, 4, 6] Y)", "=> (float[batch, 2, 4, 6] Y, int64[3] n)").replace(
        "  Y = Reshape (t, split)", "  Y = Reshape (t, split)\n  n = Shape (t)")
    result = check(text, T)
    assert result.changes == 1 and result.ops.count("Transpose") == 1
    assert "Gather" in result.ops  # the size: Shape(flat) through perm


def test_a_transpose_read_by_other_nodes_keeps_its_shape_readers(check):
    text = CHAIN.format(b="batch", merge="-1, 6, 4", split="-1, 2, 4, 6").replace(
        "=> (float[batch, 2, 4, 6] Y)",
        "=> (float[batch, 2, 4, 6] Y, int64[3] n, float[?, 4, 6] z)").replace(
        "  Y = Reshape (t, split)", "  Y = Reshape (t, split)\n  n = Shape (t)\n  z = Neg (t)")
    result = check(text, T)
    assert result.unchanged
