"""transpose_into_matmul: operand Transposes become transpose_a/transpose_b; chains merge."""

from __future__ import annotations

from onnxopt.normalize.transpose_into_matmul import transpose_into_matmul

T = transpose_into_matmul


def test_key_transposed_from_bshd_becomes_head_layout_with_transpose_b(check):
    result = check("""
    g (float[2, 4, 3, 5] Q, float[2, 6, 3, 5] K) => (float[2, 3, 4, 6] Y) {
      q = Transpose<perm = [0, 2, 1, 3]>(Q)
      k = Transpose<perm = [0, 2, 3, 1]>(K)
      Y = MatMul(q, k)
    }""", T)
    assert result.ops == ["Transpose", "Transpose", "MatMul"]
    mm = result.node("MatMul")
    assert mm.sem["transpose_b"] is True and mm.sem["transpose_a"] is False
    kt = mm.inputs[1].producer
    assert kt.attr("perm") == (0, 2, 1, 3) and kt.inputs[0].name == "K"
    assert mm.inputs[1].shape == (2, 3, 6, 5)
    assert mm.inputs[0].producer.attr("perm") == (0, 2, 1, 3)  # the query is left alone


def test_plain_last_two_swap_disappears(check):
    result = check("""
    g (float[4, 5] A, float[6, 5] B, float[5, 4] C) => (float[5, 6] Y) {
      b = Transpose<perm = [1, 0]>(B)
      a = Transpose(C)
      Y = MatMul(a, b)
    }""", T)
    assert result.ops == ["MatMul"]
    mm = result.node("MatMul")
    assert mm.sem["transpose_a"] and mm.sem["transpose_b"]
    assert [v.name for v in mm.inputs] == ["C", "B"]


def test_transpose_with_another_reader_is_shared_not_duplicated(check):
    result = check("""
    g (float[2, 6, 3, 5] K, float[2, 3, 4, 5] Q) => (float[2, 3, 4, 6] Y, float[2, 3, 5, 6] Z) {
      Z = Transpose<perm = [0, 2, 3, 1]>(K)
      Y = MatMul(Q, Z)
    }""", T)
    assert result.unchanged


def test_swap_with_another_reader_still_folds(check):
    result = check("""
    g (float[3, 4, 5] A, float[3, 6, 5] B) => (float[3, 4, 6] Y, float[3, 5, 6] Z) {
      Z = Transpose<perm = [0, 2, 1]>(B)
      Y = MatMul(A, Z)
    }""", T)
    assert result.ops == ["Transpose", "MatMul"]
    assert result.node("MatMul").inputs[1].name == "B"


def test_flag_already_set_toggles_back(check, onnx_text):
    from onnxopt.importer import import_model
    from onnxopt.ir.verifier import verify_graph

    model = import_model(onnx_text("""
    g (float[4, 5] A, float[6, 5] B) => (float[4, 6] Y) {
      b = Transpose<perm = [1, 0]>(B)
      Y = MatMul(A, b)
    }"""))
    assert T(model).changed == 1
    mm = next(iter(model.graph))
    assert mm.sem["transpose_b"] is True
    assert T(model).changed == 0
    verify_graph(model.graph)


def test_consecutive_transposes_merge(check):
    result = check("""
    g (float[2, 3, 4, 5] X) => (float[5, 2, 4, 3] Y) {
      a = Transpose<perm = [0, 2, 1, 3]>(X)
      Y = Transpose<perm = [3, 0, 1, 2]>(a)
    }""", T)
    assert result.ops == ["Transpose"]
    assert result.node("Transpose").attr("perm") == (3, 0, 2, 1)


def test_transposes_that_cancel_disappear(check):
    result = check("""
    g (float[2, 3, 4] X) => (float[2, 3, 4] Y) {
      a = Transpose<perm = [1, 2, 0]>(X)
      b = Transpose<perm = [2, 0, 1]>(a)
      Y = Neg(b)
    }""", T)
    assert result.ops == ["Neg"]


def test_inner_transpose_with_another_reader_stays(check):
    result = check("""
    g (float[2, 3, 4] X) => (float[3, 2, 4] Y, float[4, 3, 2] Z) {
      Y = Transpose<perm = [1, 0, 2]>(X)
      Z = Transpose<perm = [2, 0, 1]>(Y)
    }""", T)
    assert result.unchanged


def test_head_transpose_is_not_turned_into_another(check):
    result = check("""
    g (float[2, 3, 5, 5] S, float[2, 5, 3, 7] V) => (float[2, 3, 5, 7] Y) {
      v = Transpose<perm = [0, 2, 1, 3]>(V)
      Y = MatMul(S, v)
    }""", T)
    assert result.unchanged
