"""fold_constants: every folded op agrees with ONNX Runtime bit for bit (ints) or to 1e-6."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxopt.normalize.fold_constants import fold_constants

# name -> (output type, body computing %r from constants); the model returns Identity(r)
CASES = {
    "add_int": ("int64[3]", """
        a = Constant<value = int64[3] {1, 2, 3}>()
        b = Constant<value = int64[1] {5}>()
        r = Add(a, b)"""),
    "sub_float": ("float[2]", """
        a = Constant<value = float[2] {1.5, -2.0}>()
        b = Constant<value = float {0.25}>()
        r = Sub(a, b)"""),
    "mul_int32": ("int32[2]", """
        a = Constant<value = int32[2] {7, -3}>()
        b = Constant<value = int32[2] {6, 5}>()
        r = Mul(a, b)"""),
    "div_int_truncates": ("int64[6]", """
        a = Constant<value = int64[6] {-7, 7, -8, 9, 7, -1}>()
        b = Constant<value = int64[6] {2, -2, 3, 4, 7, 3}>()
        r = Div(a, b)"""),
    "div_int32": ("int32[2]", """
        a = Constant<value = int32[2] {-9, 9}>()
        b = Constant<value = int32[2] {4, -4}>()
        r = Div(a, b)"""),
    "div_float": ("float[2]", """
        a = Constant<value = float[2] {1.0, -3.0}>()
        b = Constant<value = float {3.0}>()
        r = Div(a, b)"""),
    "pow_float": ("float[3]", """
        a = Constant<value = float[3] {2.0, 0.5, 3.0}>()
        b = Constant<value = float {2.5}>()
        r = Pow(a, b)"""),
    "pow_int_int": ("int64[3]", """
        a = Constant<value = int64[3] {2, -3, 5}>()
        b = Constant<value = int64 {3}>()
        r = Pow(a, b)"""),
    "pow_float_int": ("float[2]", """
        a = Constant<value = float[2] {2.0, 1.5}>()
        b = Constant<value = int64 {2}>()
        r = Pow(a, b)"""),
    "sqrt": ("float[2]", """
        a = Constant<value = float[2] {4.0, 2.0}>()
        r = Sqrt(a)"""),
    "neg": ("int64[2]", """
        a = Constant<value = int64[2] {4, -2}>()
        r = Neg(a)"""),
    "reciprocal": ("float[2]", """
        a = Constant<value = float[2] {4.0, 3.0}>()
        r = Reciprocal(a)"""),
    "abs": ("float[2]", """
        a = Constant<value = float[2] {-4.0, 3.0}>()
        r = Abs(a)"""),
    "exp_log": ("float[2]", """
        a = Constant<value = float[2] {0.5, 3.0}>()
        b = Exp(a)
        r = Log(b)"""),
    "floor_ceil": ("float[3]", """
        a = Constant<value = float[3] {-1.5, 0.5, 2.0}>()
        b = Floor(a)
        c = Ceil(a)
        r = Add(b, c)"""),
    "cast_truncates": ("int64[4]", """
        a = Constant<value = float[4] {-1.7, 1.7, 2.5, -0.2}>()
        r = Cast<to = 7>(a)"""),
    "cast_to_bool": ("bool[3]", """
        a = Constant<value = float[3] {0.0, -0.5, 2.0}>()
        r = Cast<to = 9>(a)"""),
    "cast_to_half": ("float16[2]", """
        a = Constant<value = float[2] {0.1, 70000.0}>()
        r = Cast<to = 10>(a)"""),
    # float32 -> bfloat16 rounds to nearest, ties to even, as ORT's Cast does: a tie
    # (1.00390625), a tie rounding up to even (1.01171875), values that round up and down
    "cast_to_bfloat16_and_back": ("float[6]", """
        a = Constant<value = float[6] {0.1, 1.00390625, 1.01171875, 0.08838834764831845,
                                       -10000.0, 3.3e38}>()
        b = Cast<to = 16>(a)
        r = Cast<to = 1>(b)"""),
    "reshape_zero_minus_one": ("float[2, 6, 1]", """
        a = Constant<value = float[2, 3, 2] {1,2,3,4,5,6,7,8,9,10,11,12}>()
        s = Constant<value = int64[3] {0, -1, 1}>()
        r = Reshape(a, s)"""),
    "unsqueeze_negative": ("float[1, 2, 3, 1]", """
        a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()
        x = Constant<value = int64[2] {-1, 0}>()
        r = Unsqueeze(a, x)"""),
    "squeeze_axes": ("float[1, 3]", """
        a = Constant<value = float[1, 3, 1] {1,2,3}>()
        x = Constant<value = int64[1] {-1}>()
        r = Squeeze(a, x)"""),
    "squeeze_all": ("float[3]", """
        a = Constant<value = float[1, 3, 1] {1,2,3}>()
        r = Squeeze(a)"""),
    "concat": ("int64[2, 3]", """
        a = Constant<value = int64[2, 1] {1, 2}>()
        b = Constant<value = int64[2, 2] {3,4,5,6}>()
        r = Concat<axis = -1>(a, b)"""),
    "gather_negative": ("float[2, 2]", """
        a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()
        i = Constant<value = int64[2] {-1, 0}>()
        r = Gather<axis = 1>(a, i)"""),
    "gather_scalar": ("int64", """
        a = Constant<value = int64[3] {7, 8, 9}>()
        i = Constant<value = int64 {1}>()
        r = Gather(a, i)"""),
    "slice_negative_step": ("int64[1, 3]", """
        a = Constant<value = int64[2, 5] {0,1,2,3,4,5,6,7,8,9}>()
        s = Constant<value = int64[2] {-1, 9223372036854775807}>()
        e = Constant<value = int64[2] {-9223372036854775807, 0}>()
        x = Constant<value = int64[2] {1, 0}>()
        t = Constant<value = int64[2] {-2, -1}>()
        r = Slice(a, s, e, x, t)"""),
    "slice_clamped": ("int64[3]", """
        a = Constant<value = int64[5] {0,1,2,3,4}>()
        s = Constant<value = int64[1] {-100}>()
        e = Constant<value = int64[1] {3}>()
        r = Slice(a, s, e)"""),
    "transpose_perm": ("float[3, 1, 2]", """
        a = Constant<value = float[2, 3, 1] {1,2,3,4,5,6}>()
        r = Transpose<perm = [1, 2, 0]>(a)"""),
    "transpose_default": ("float[3, 2]", """
        a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()
        r = Transpose(a)"""),
    "shape_start_end": ("int64[2]", """
        a = Constant<value = float[2, 3, 1, 2] {1,2,3,4,5,6,7,8,9,10,11,12}>()
        r = Shape<start = 1, end = -1>(a)"""),
    "size": ("int64", """
        a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()
        r = Size(a)"""),
    "comparisons": ("bool[3]", """
        a = Constant<value = int64[3] {1, 2, 3}>()
        b = Constant<value = int64[3] {2, 2, 2}>()
        e = Equal(a, b)
        l = Less(a, b)
        g = Greater(a, b)
        le = LessOrEqual(a, b)
        ge = GreaterOrEqual(a, b)
        x = Or(e, l)
        y = And(x, le)
        z = Not(g)
        w = And(y, z)
        r = And(w, ge)"""),
    "where": ("float[3]", """
        c = Constant<value = bool[3] {1, 0, 1}>()
        a = Constant<value = float[3] {1,2,3}>()
        b = Constant<value = float {-1.0}>()
        r = Where(c, a, b)"""),
    "range_int": ("int64[4]", """
        a = Constant<value = int64 {10}>()
        b = Constant<value = int64 {-3}>()
        d = Constant<value = int64 {-4}>()
        r = Range(a, b, d)"""),
    "range_float_accumulates": ("float[10]", """
        a = Constant<value = float {0.1}>()
        b = Constant<value = float {3.0}>()
        d = Constant<value = float {0.3}>()
        r = Range(a, b, d)"""),
    "constant_of_shape": ("int64[2, 3]", """
        s = Constant<value = int64[2] {2, 3}>()
        r = ConstantOfShape<value = int64[1] {7}>(s)"""),
    "constant_of_shape_default": ("float[2]", """
        s = Constant<value = int64[1] {2}>()
        r = ConstantOfShape(s)"""),
    "expand_bidirectional": ("float[2, 3, 4]", """
        a = Constant<value = float[3, 1] {1,2,3}>()
        s = Constant<value = int64[3] {2, 1, 4}>()
        r = Expand(a, s)"""),
    "trilu_lower": ("float[3, 3]", """
        a = Constant<value = float[3, 3] {1,2,3,4,5,6,7,8,9}>()
        k = Constant<value = int64 {1}>()
        r = Trilu<upper = 0>(a, k)"""),
    "trilu_upper": ("float[2, 3, 3]", """
        a = Constant<value = float[2, 3, 3] {1,2,3,4,5,6,7,8,9,1,2,3,4,5,6,7,8,9}>()
        r = Trilu(a)"""),
    "min_max_variadic": ("float[3]", """
        a = Constant<value = float[3] {1,5,3}>()
        b = Constant<value = float[3] {4,2,6}>()
        c = Constant<value = float {2.5}>()
        m = Max(a, b, c)
        r = Min(m, a, c)"""),
    "cumsum_exclusive_reverse": ("int64[2, 3]", """
        a = Constant<value = int64[2, 3] {1,2,3,4,5,6}>()
        x = Constant<value = int64 {-1}>()
        r = CumSum<exclusive = 1, reverse = 1>(a, x)"""),
    "cumsum": ("float[2, 3]", """
        a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()
        x = Constant<value = int32 {0}>()
        r = CumSum(a, x)"""),
    "identity": ("float[2]", """
        a = Constant<value = float[2] {1, 2}>()
        b = Identity(a)
        r = Neg(b)"""),
    "reduce_sum_keepdims0": ("float[2]", """
        a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()
        x = Constant<value = int64[1] {-1}>()
        r = ReduceSum<keepdims = 0>(a, x)"""),
    "reduce_mean_all": ("float[1, 1]", """
        a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()
        r = ReduceMean(a)"""),
    "reduce_max": ("int64[1, 3]", """
        a = Constant<value = int64[2, 3] {1,9,3,4,5,6}>()
        x = Constant<value = int64[1] {0}>()
        r = ReduceMax(a, x)"""),
    "reduce_min_noop": ("float[2]", """
        a = Constant<value = float[2] {1, 2}>()
        x = Constant<value = int64[0] {}>()
        r = ReduceMin<noop_with_empty_axes = 1>(a, x)"""),
    "matmul_half": ("float16[2]", """
        f = Constant<value = float[2, 3] {1.5, 2.25, 3.0, 4.0, 5.5, 6.0}>()
        g = Constant<value = float[3] {1.0, 0.5, -1.0}>()
        a = Cast<to = 10>(f)
        b = Cast<to = 10>(g)
        r = MatMul(a, b)"""),
    "reduce_sum_half": ("float16[2]", """
        f = Constant<value = float[2, 3] {1000.0, 0.25, 0.5, 4.0, 5.5, 2048.0}>()
        a = Cast<to = 10>(f)
        x = Constant<value = int64[1] {1}>()
        r = ReduceSum<keepdims = 0>(a, x)"""),
    "tile": ("int64[2, 6]", """
        a = Constant<value = int64[1, 2] {1, 2}>()
        t = Constant<value = int64[2] {2, 3}>()
        r = Tile(a, t)"""),
    "matmul": ("float[2]", """
        a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()
        b = Constant<value = float[3] {1,0,-1}>()
        r = MatMul(a, b)"""),
    "isnan_isinf": ("bool[3]", """
        a = Constant<value = float[3] {1.0, 0.0, 2.0}>()
        z = Constant<value = float {0.0}>()
        d = Div(a, z)
        n = IsNaN(d)
        i = IsInf<detect_positive = 0>(d)
        r = Or(n, i)"""),
    "reference_fallback_sin": ("float[2]", """
        a = Constant<value = float[2] {0.5, 1.0}>()
        r = Sin(a)"""),
    "reference_fallback_mod": ("int64[3]", """
        a = Constant<value = int64[3] {-7, 7, 5}>()
        b = Constant<value = int64 {3}>()
        r = Mod(a, b)"""),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_folded_value_matches_onnx_runtime(check, name):
    out_type, body = CASES[name]
    result = check(f"g () => ({out_type} Y) {{\n{body}\n        Y = Identity(r)\n}}",
                   fold_constants, rtol=1e-6)
    assert result.ops == ["Identity"], result.after
    assert result.changes >= 1


def test_shape_arithmetic_chain_folds_into_reshape_target(check):
    result = check("""
    g (float[2, 12] X) => (float[2, 3, 4] Y) {
      s = Constant<value = int64[2] {3, 4}>()
      w = ConstantOfShape<value = float[1] {1.0}>(s)
      shp = Shape(w)
      zero = Constant<value = int64[1] {0}>()
      one = Constant<value = int64[1] {1}>()
      d0 = Gather(shp, zero)
      d1 = Gather(shp, one)
      lead = Constant<value = int64[1] {-1}>()
      full = Concat<axis = 0>(lead, d0, d1)
      Y = Reshape(X, full)
    }""", fold_constants)
    assert result.ops == ["Reshape"]
    assert result.changes == 5


def test_shape_and_size_of_static_non_constant_fold(check):
    result = check("""
    g (float[2, 3] X) => (float[6] Y) {
      n = Size(X)
      s0 = Constant<value = int64[1] {0}>()
      m = Unsqueeze(n, s0)
      Y = Reshape(X, m)
    }""", fold_constants)
    assert result.ops == ["Reshape"]


def test_shape_of_symbolic_dim_is_kept(check):
    result = check("""
    g (float[N, 3] X) => (int64[1] Y) {
      s = Shape(X)
      Y = ReduceProd<keepdims = 1>(s)
    }""", fold_constants)
    assert result.unchanged


def test_output_over_the_size_cap_is_not_materialised(check):
    result = check("""
    g (float[1] X) => (float[1] Y) {
      s = Constant<value = int64[2] {2000, 1000}>()
      big = ConstantOfShape<value = float[1] {1.0}>(s)
      r = ReduceSum<keepdims = 0>(big)
      Y = Add(X, r)
    }""", fold_constants, run=False)
    assert result.ops == ["ConstantOfShape", "ReduceSum", "Add"]


def test_expand_over_the_size_cap_is_not_materialised(check):
    result = check("""
    g (float[1] X) => (float[1] Y) {
      a = Constant<value = float[1] {1.0}>()
      s = Constant<value = int64[3] {100, 100, 101}>()
      big = Expand(a, s)
      r = ReduceMax<keepdims = 0>(big)
      Y = Add(X, r)
    }""", fold_constants, run=False)
    assert "Expand" in result.ops


def test_random_ops_are_never_folded(check):
    result = check("""
    g (float[2] X) => (float[2] Y) {
      a = Constant<value = float[2] {1, 2}>()
      r = RandomUniformLike<seed = 1.0>(a)
      Y = Add(X, r)
    }""", fold_constants, run=False)
    assert result.unchanged


def test_graph_output_stays_a_node_output(check):
    result = check("""
    g () => (float[2] Y) {
      a = Constant<value = float[2] {1, 2}>()
      Y = Neg(a)
    }""", fold_constants)
    assert result.unchanged


def test_non_standard_domain_is_never_folded(onnx_text):
    from onnxopt.importer import import_model

    proto = onnx_text("""
    g (float[2] X) => (float[2] Y) {
      a = Constant<value = float[2] {1, 2}>()
      r = custom.Double(a)
      Y = Add(X, r)
    }""", extra=', "custom" : 1')
    model = import_model(proto)
    assert fold_constants(model).changed == 0


def test_matmul_transpose_flags_are_respected(check):
    from onnxopt.normalize.transpose_into_matmul import transpose_into_matmul

    def both(model):
        return transpose_into_matmul(model) + fold_constants(model)

    result = check("""
    g () => (float[2, 2] Y) {
      a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()
      b = Constant<value = float[2, 3] {1,0,2,0,1,-1}>()
      t = Transpose<perm = [1, 0]>(b)
      r = MatMul(a, t)
      Y = Identity(r)
    }""", both)
    assert result.ops == ["Identity"]


BOUNDS = st.one_of(st.integers(-7, 7), st.sampled_from([2**63 - 1, -(2**63 - 1), -(2**63)]))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_slice_folding_matches_onnx_runtime_on_random_arguments(check, data):
    """Slice's clamping rules: negative steps, out-of-range and INT64-extreme bounds."""
    axes = data.draw(st.lists(st.integers(-2, 1), min_size=1, max_size=2, unique_by=lambda a: a % 2))
    n = len(axes)
    starts = data.draw(st.lists(BOUNDS, min_size=n, max_size=n))
    ends = data.draw(st.lists(BOUNDS, min_size=n, max_size=n))
    steps = data.draw(st.lists(st.sampled_from([-3, -2, -1, 1, 2, 3]), min_size=n, max_size=n))
    dims = ", ".join(str(d) for d in _sliced_shape(starts, ends, axes, steps))
    body = f"""
        a = Constant<value = int64[4, 5] {{{", ".join(str(i) for i in range(20))}}}>()
        s = Constant<value = int64[{n}] {{{", ".join(map(str, starts))}}}>()
        e = Constant<value = int64[{n}] {{{", ".join(map(str, ends))}}}>()
        x = Constant<value = int64[{n}] {{{", ".join(map(str, axes))}}}>()
        t = Constant<value = int64[{n}] {{{", ".join(map(str, steps))}}}>()
        r = Slice(a, s, e, x, t)"""
    result = check(f"g () => (int64[{dims}] Y) {{\n{body}\n        Y = Identity(r)\n}}",
                   fold_constants, seeds=1)
    assert result.ops == ["Identity"]


def _sliced_shape(starts, ends, axes, steps):
    """ONNX Slice's output shape on [4, 5], written independently of the pass from the spec."""
    shape = [4, 5]
    out = list(shape)
    for st_, en, ax, sp in zip(starts, ends, axes, steps):
        ax %= 2
        dim = shape[ax]
        if en == 2**63 - 1 and sp < 0:
            en = -1 - dim  # ONNX Runtime reads INT64_MAX as "to the end" in either direction
        st_ = st_ + dim if st_ < 0 else st_
        en = en + dim if en < 0 else en
        if sp > 0:
            st_, en = max(0, min(st_, dim)), max(0, min(en, dim))
        else:
            st_, en = max(-1, min(st_, dim - 1)), max(-1, min(en, dim - 1))
        out[ax] = len(range(st_, en, sp))
    return out


def test_a_cast_to_bfloat16_folds_only_from_finite_float32(check):
    kept = check("""
    g () => (float[2] Y) {
      a = Constant<value = float[2] {1.0, inf}>()
      b = Cast<to = 16>(a)
      Y = Cast<to = 1>(b)
    }""", fold_constants)
    assert kept.ops == ["Cast", "Cast"], kept.after
