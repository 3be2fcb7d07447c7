"""fold_constants: every folded op agrees with ONNX Runtime bit for bit (ints) or to 1e-6."""

from __future__ import annotations

import pytest

from onnxopt.normalize.fold_constants import fold_constants

# (inputs as Constant lines, the op line producing %r, output type)
CASES = {
    "add_int": ("a = Constant<value = int64[3] {1, 2, 3}>()\nb = Constant<value = int64[1] {5}>()",
                "r = Add(a, b)", "int64[3]"),
    "sub_float": ("a = Constant<value = float[2] {1.5, -2.0}>()\nb = Constant<value = float {0.25}>()",
                  "r = Sub(a, b)", "float[2]"),
    "mul_int32": ("a = Constant<value = int32[2] {7, -3}>()\nb = Constant<value = int32[2] {6, 5}>()",
                  "r = Mul(a, b)", "int32[2]"),
    "div_int_truncates": (
        "a = Constant<value = int64[6] {-7, 7, -8, 9, 7, -1}>()\n"
        "b = Constant<value = int64[6] {2, -2, 3, 4, 7, 3}>()", "r = Div(a, b)", "int64[6]"),
    "div_int32": ("a = Constant<value = int32[2] {-9, 9}>()\nb = Constant<value = int32[2] {4, -4}>()",
                  "r = Div(a, b)", "int32[2]"),
    "div_float": ("a = Constant<value = float[2] {1.0, -3.0}>()\nb = Constant<value = float {3.0}>()",
                  "r = Div(a, b)", "float[2]"),
    "pow_float": ("a = Constant<value = float[3] {2.0, 0.5, 3.0}>()\nb = Constant<value = float {2.5}>()",
                  "r = Pow(a, b)", "float[3]"),
    "pow_int_int": ("a = Constant<value = int64[3] {2, -3, 5}>()\nb = Constant<value = int64 {3}>()",
                    "r = Pow(a, b)", "int64[3]"),
    "pow_float_int": ("a = Constant<value = float[2] {2.0, 1.5}>()\nb = Constant<value = int64 {2}>()",
                      "r = Pow(a, b)", "float[2]"),
    "sqrt": ("a = Constant<value = float[2] {4.0, 2.0}>()", "r = Sqrt(a)", "float[2]"),
    "neg": ("a = Constant<value = int64[2] {4, -2}>()", "r = Neg(a)", "int64[2]"),
    "reciprocal": ("a = Constant<value = float[2] {4.0, 3.0}>()", "r = Reciprocal(a)", "float[2]"),
    "abs": ("a = Constant<value = float[2] {-4.0, 3.0}>()", "r = Abs(a)", "float[2]"),
    "exp_log": ("a = Constant<value = float[2] {0.5, 3.0}>()\nb = Exp(a)", "r = Log(b)", "float[2]"),
    "floor_ceil": ("a = Constant<value = float[3] {-1.5, 0.5, 2.0}>()\nb = Floor(a)\nc = Ceil(a)",
                   "r = Add(b, c)", "float[3]"),
    "cast_truncates": ("a = Constant<value = float[4] {-1.7, 1.7, 2.5, -0.2}>()",
                       "r = Cast<to = 7>(a)", "int64[4]"),
    "cast_to_bool": ("a = Constant<value = float[3] {0.0, -0.5, 2.0}>()", "r = Cast<to = 9>(a)",
                     "bool[3]"),
    "cast_to_half": ("a = Constant<value = float[2] {0.1, 70000.0}>()", "r = Cast<to = 10>(a)",
                     "float16[2]"),
    "reshape_zero_minus_one": ("a = Constant<value = float[2, 3, 2] {1,2,3,4,5,6,7,8,9,10,11,12}>()\n"
                               "s = Constant<value = int64[3] {0, -1, 1}>()", "r = Reshape(a, s)",
                               "float[2, 6, 1]"),
    "unsqueeze_negative": ("a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()\n"
                           "x = Constant<value = int64[2] {-1, 0}>()", "r = Unsqueeze(a, x)",
                           "float[1, 2, 3, 1]"),
    "squeeze_axes": ("a = Constant<value = float[1, 3, 1] {1,2,3}>()\nx = Constant<value = int64[1] {-1}>()",
                     "r = Squeeze(a, x)", "float[1, 3]"),
    "squeeze_all": ("a = Constant<value = float[1, 3, 1] {1,2,3}>()", "r = Squeeze(a)", "float[3]"),
    "concat": ("a = Constant<value = int64[2, 1] {1, 2}>()\nb = Constant<value = int64[2, 2] {3,4,5,6}>()",
               "r = Concat<axis = -1>(a, b)", "int64[2, 3]"),
    "gather_negative": ("a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()\n"
                        "i = Constant<value = int64[2] {-1, 0}>()", "r = Gather<axis = 1>(a, i)",
                        "float[2, 2]"),
    "gather_scalar": ("a = Constant<value = int64[3] {7, 8, 9}>()\ni = Constant<value = int64 {1}>()",
                      "r = Gather(a, i)", "int64"),
    "slice_negative_step": (
        "a = Constant<value = int64[2, 5] {0,1,2,3,4,5,6,7,8,9}>()\n"
        "s = Constant<value = int64[2] {-1, 9223372036854775807}>()\n"
        "e = Constant<value = int64[2] {-9223372036854775807, 0}>()\n"
        "x = Constant<value = int64[2] {1, 0}>()\nt = Constant<value = int64[2] {-2, -1}>()",
        "r = Slice(a, s, e, x, t)", "int64[1, 3]"),
    "slice_clamped": ("a = Constant<value = int64[5] {0,1,2,3,4}>()\n"
                      "s = Constant<value = int64[1] {-100}>()\ne = Constant<value = int64[1] {3}>()",
                      "r = Slice(a, s, e)", "int64[3]"),
    "transpose_perm": ("a = Constant<value = float[2, 3, 1] {1,2,3,4,5,6}>()",
                       "r = Transpose<perm = [1, 2, 0]>(a)", "float[3, 1, 2]"),
    "transpose_default": ("a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()", "r = Transpose(a)",
                          "float[3, 2]"),
    "shape_start_end": ("a = Constant<value = float[2, 3, 1, 2] {1,2,3,4,5,6,7,8,9,10,11,12}>()",
                        "r = Shape<start = 1, end = -1>(a)", "int64[2]"),
    "size": ("a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()", "r = Size(a)", "int64"),
    "comparisons": ("a = Constant<value = int64[3] {1, 2, 3}>()\nb = Constant<value = int64[3] {2, 2, 2}>()\n"
                    "e = Equal(a, b)\nl = Less(a, b)\ng = Greater(a, b)\nle = LessOrEqual(a, b)\n"
                    "ge = GreaterOrEqual(a, b)\nx = Or(e, l)\ny = And(x, le)\nz = Not(g)\nw = And(y, z)",
               "r = And(w, ge)", "bool[3]"),
    "where": ("c = Constant<value = bool[3] {1, 0, 1}>()\na = Constant<value = float[3] {1,2,3}>()\n"
              "b = Constant<value = float {-1.0}>()", "r = Where(c, a, b)", "float[3]"),
    "range_int": ("a = Constant<value = int64 {10}>()\nb = Constant<value = int64 {-3}>()\n"
                  "d = Constant<value = int64 {-4}>()", "r = Range(a, b, d)", "int64[4]"),
    "range_float_accumulates": ("a = Constant<value = float {0.1}>()\nb = Constant<value = float {3.0}>()\n"
                                "d = Constant<value = float {0.3}>()", "r = Range(a, b, d)", "float[10]"),
    "constant_of_shape": ("s = Constant<value = int64[2] {2, 3}>()",
                          "r = ConstantOfShape<value = int64[1] {7}>(s)", "int64[2, 3]"),
    "constant_of_shape_default": ("s = Constant<value = int64[1] {2}>()", "r = ConstantOfShape(s)",
                                  "float[2]"),
    "expand_bidirectional": ("a = Constant<value = float[3, 1] {1,2,3}>()\n"
                             "s = Constant<value = int64[3] {2, 1, 4}>()", "r = Expand(a, s)",
                             "float[2, 3, 4]"),
    "trilu_lower": ("a = Constant<value = float[3, 3] {1,2,3,4,5,6,7,8,9}>()\n"
                    "k = Constant<value = int64 {1}>()", "r = Trilu<upper = 0>(a, k)", "float[3, 3]"),
    "trilu_upper": ("a = Constant<value = float[2, 3, 3] {1,2,3,4,5,6,7,8,9,1,2,3,4,5,6,7,8,9}>()",
                    "r = Trilu(a)", "float[2, 3, 3]"),
    "min_max_variadic": ("a = Constant<value = float[3] {1,5,3}>()\nb = Constant<value = float[3] {4,2,6}>()\n"
                         "c = Constant<value = float {2.5}>()\nm = Max(a, b, c)", "r = Min(m, a, c)",
                         "float[3]"),
    "cumsum_exclusive_reverse": ("a = Constant<value = int64[2, 3] {1,2,3,4,5,6}>()\n"
                                 "x = Constant<value = int64 {-1}>()",
                                 "r = CumSum<exclusive = 1, reverse = 1>(a, x)", "int64[2, 3]"),
    "cumsum": ("a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()\nx = Constant<value = int32 {0}>()",
               "r = CumSum(a, x)", "float[2, 3]"),
    "identity": ("a = Constant<value = float[2] {1, 2}>()\nb = Identity(a)", "r = Neg(b)", "float[2]"),
    "reduce_sum_keepdims0": ("a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()\n"
                             "x = Constant<value = int64[1] {-1}>()",
                             "r = ReduceSum<keepdims = 0>(a, x)", "float[2]"),
    "reduce_mean_all": ("a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()", "r = ReduceMean(a)",
                        "float[1, 1]"),
    "reduce_max": ("a = Constant<value = int64[2, 3] {1,9,3,4,5,6}>()\nx = Constant<value = int64[1] {0}>()",
                   "r = ReduceMax(a, x)", "int64[1, 3]"),
    "reduce_min_noop": ("a = Constant<value = float[2] {1, 2}>()\nx = Constant<value = int64[0] {}>()",
                        "r = ReduceMin<noop_with_empty_axes = 1>(a, x)", "float[2]"),
    "tile": ("a = Constant<value = int64[1, 2] {1, 2}>()\nt = Constant<value = int64[2] {2, 3}>()",
             "r = Tile(a, t)", "int64[2, 6]"),
    "matmul": ("a = Constant<value = float[2, 3] {1,2,3,4,5,6}>()\nb = Constant<value = float[3] {1,0,-1}>()",
               "r = MatMul(a, b)", "float[2]"),
    "isnan_isinf": ("a = Constant<value = float[3] {1.0, 0.0, 2.0}>()\nz = Constant<value = float {0.0}>()\n"
                    "d = Div(a, z)\nn = IsNaN(d)\ni = IsInf<detect_positive = 0>(d)", "r = Or(n, i)",
                    "bool[3]"),
    "reference_fallback_sin": ("a = Constant<value = float[2] {0.5, 1.0}>()", "r = Sin(a)", "float[2]"),
    "reference_fallback_mod": ("a = Constant<value = int64[3] {-7, 7, 5}>()\nb = Constant<value = int64 {3}>()",
                               "r = Mod(a, b)", "int64[3]"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_folded_value_matches_onnx_runtime(check, name):
    consts, op, out_type = CASES[name]
    body = "\n  ".join(consts.splitlines() + [op, "Y = Identity(r)"])
    result = check(f"g () => ({out_type} Y) {{\n  {body}\n}}", fold_constants, rtol=1e-6)
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
    assert fold_constants(model) == 0


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
