"""A computed Reshape target becomes a constant where shape inference knows what it holds."""

from __future__ import annotations

from onnxopt.importer import import_model
from onnxopt.normalize.constant_reshape_target import constant_reshape_target
from onnxopt.normalize.shapes import infer_shapes


def _with_shapes(model):
    infer_shapes(model)
    return constant_reshape_target(model).changed


# TorchScript's head split: [batch, seq] read from x's shape, then -1 heads of 16.
HEAD_SPLIT = """
g (float[B, S, 64] x) => (float[B, S, 4, 16] y) {{
    shape = Shape (x)
    i0 = Constant <value = int64 {{0}}> ()
    i1 = Constant <value = int64 {{1}}> ()
    b = Gather <axis = 0> (shape, i0)
    s = Gather <axis = 0> (shape, i1)
    ax = Constant <value = int64[1] {{0}}> ()
    bu = Unsqueeze (b, ax)
    su = Unsqueeze (s, ax)
    rest = Constant <value = int64[2] {{{rest}}}> ()
    target = Concat <axis = 0> (bu, su, rest)
    y = Reshape <allowzero = {allowzero}> (x, target)
}}
"""


def _target(result):
    reshape = result.node("Reshape")
    return reshape.input(1).const.numpy().tolist(), reshape.attr("allowzero", 0)


def test_a_head_split_gets_a_constant_target(check):
    result = check(HEAD_SPLIT.format(rest="-1, 16", allowzero=0), _with_shapes)
    assert result.changes == 1 and _target(result) == ([0, 0, -1, 16], 0)


def test_allowzero_without_a_literal_zero_means_the_same_without_it(check):
    result = check(HEAD_SPLIT.format(rest="-1, 16", allowzero=1), _with_shapes)
    assert result.changes == 1 and _target(result) == ([0, 0, -1, 16], 0)


def test_dims_that_are_zero_at_run_time_copy_as_zero(check):
    result = check(HEAD_SPLIT.format(rest="4, 16", allowzero=1), _with_shapes, dim=0)
    assert result.changes == 1 and _target(result) == ([0, 0, 4, 16], 0)


def test_a_literal_zero_under_allowzero_keeps_its_computed_target(check):
    text = HEAD_SPLIT.format(rest="0, 64", allowzero=1).replace(
        "float[B, S, 4, 16] y", "float[B, S, 0, 64] y")
    result = check(text, _with_shapes, run=False)
    assert result.changes == 0


# [N, 64] -> [B, S, 64]: neither B nor S is a dim of the input at its position.
TWO_UNKNOWN = """
g (float[B, S, 64] x, float[N, 64] flat) => (float[B, S, 64] y) {
    shape = Shape (x)
    head = Constant <value = int64[1] {0}> ()
    end = Constant <value = int64[1] {2}> ()
    bs = Slice (shape, head, end)
    width = Constant <value = int64[1] {64}> ()
    target = Concat <axis = 0> (bs, width)
    y = Reshape (flat, target)
}
"""


def test_two_entries_that_no_input_dim_proves_keep_their_computed_target(make_model):
    model = import_model(make_model(TWO_UNKNOWN))
    assert _with_shapes(model) == 0


# x [B, S, 64] -> [B, N, 16] with N read from another input: B is a copy (0), N is not
# proved, and a -1 of ours beside a copy could be ambiguous where B is 0 at run time.
OURS_BESIDE_A_COPY = """
g (float[B, S, 64] x, float[N] other) => (float[B, N, 16] y) {
    xs = Shape (x)
    head = Constant <value = int64[1] {0}> ()
    one = Constant <value = int64[1] {1}> ()
    b = Slice (xs, head, one)
    n = Shape (other)
    width = Constant <value = int64[1] {16}> ()
    target = Concat <axis = 0> (b, n, width)
    y = Reshape (x, target)
}
"""


def test_a_minus_one_of_ours_needs_positive_numbers_beside_it(make_model):
    model = import_model(make_model(OURS_BESIDE_A_COPY))
    reshape = next(n for n in model.graph if n.op_type == "Reshape")
    assert _with_shapes(model) == 0 and reshape.input(1).sym is not None
