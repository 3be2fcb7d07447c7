"""The pass list as a whole: registered in order, reaching a fixed point, inside subgraphs too."""

from __future__ import annotations

from onnxopt.normalize.driver import PASSES, run_passes


def test_passes_are_registered():
    names = [name for name, _ in PASSES]
    for name in ("fold_constants", "remove_noops", "eliminate_dead_code",
                 "eliminate_common_subexpressions", "commutative_order", "canonical_scale",
                 "transpose_into_matmul", "softmax_canonical", "where_to_additive"):
        assert name in names
    assert names.index("fold_constants") < names.index("eliminate_dead_code")


def _all(model):
    counts = run_passes(model, debug=True)
    assert run_passes(model) == {}
    return sum(counts.values())


def test_passes_work_inside_subgraphs(check):
    result = check("""
    g (bool C, float[2, 3] X) => (float[2, 3] Y) {
      two = Constant<value = float {2.0}>()
      Y = If(C) <
        then_branch = g1 () => (float[2, 3] a) {
          i = Identity(X)
          k = Constant<value = float {4.0}>()
          h = Div(two, k)
          d = Div(i, h)
          a = Mul(d, two)
        },
        else_branch = g2 () => (float[2, 3] b) {
          e1 = Exp(X)
          e2 = Exp(X)
          unused = Neg(X)
          b = Add(e1, e2)
        }>
    }""", _all)
    (if_node,) = list(result.model.graph)
    then_g, else_g = if_node.subgraphs()
    assert [n.op_type for n in then_g] == ["Mul"]  # Identity gone, 2/4 folded, Div->Mul, Muls merged
    assert float(next(iter(then_g)).inputs[1].const.numpy()) == 4.0
    assert [n.op_type for n in else_g] == ["Exp", "Add"]


def test_attention_spelled_three_ways_normalizes_to_one_form(check):
    template = """
    g (float[2, 5, 4, 8] Qs, float[2, 5, 4, 8] Ks, bool[2, 1, 1, 5] M) => (float[2, 4, 5, 5] Y) {{
      q = Transpose<perm = [0, 2, 1, 3]>(Qs)
      {body}
      big = Constant<value = float {{-3.4028235e38}}>()
      w = Where(M, sc, big)
      ax = Constant<value = int64[1] {{-1}}>()
      mx = ReduceMax<keepdims = 1>(w, ax)
      df = Sub(w, mx)
      ex = Exp(df)
      sm = ReduceSum<keepdims = 1>(ex, ax)
      Y = Div(ex, sm)
    }}"""
    bodies = [
        # GPT-2 style: K^T straight from [B,S,H,D], divide the scores
        """kt = Transpose<perm = [0, 2, 3, 1]>(Ks)
      raw = MatMul(q, kt)
      d = Constant<value = float {2.828427}>()
      sc = Div(raw, d)""",
        # SDPA style: both operands scaled by d**-0.25, K transposed in two steps
        """k = Transpose<perm = [0, 2, 1, 3]>(Ks)
      kt = Transpose<perm = [0, 1, 3, 2]>(k)
      s4 = Constant<value = float {0.59460356}>()
      qs = Mul(q, s4)
      ks = Mul(s4, kt)
      sc = MatMul(qs, ks)""",
        # scale on the query only, by a [1]-shaped constant
        """kt = Transpose<perm = [0, 2, 3, 1]>(Ks)
      s8 = Constant<value = float[1] {0.35355339}>()
      qs = Mul(q, s8)
      sc = MatMul(qs, kt)""",
    ]
    forms = set()
    for body in bodies:
        result = check(template.format(body=body), _all)
        assert result.ops == ["Transpose", "Transpose", "MatMul", "Mul", "Where", "Add",
                              "Softmax"], result.after
        mm = result.node("MatMul")
        assert mm.sem["transpose_b"] and not mm.sem["transpose_a"]
        assert mm.inputs[1].producer.attr("perm") == (0, 2, 1, 3)
        forms.add(tuple(result.ops))
    assert len(forms) == 1
