"""AttentionFused: its decomposition in ONNX Runtime matches the NumPy reference, soft-capped
scores included (applied before the mask, so masked keys stay masked)."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.ops.attention import reference

ATTENTION = """
g (float[B, 4, S, 8] q, float[B, 2, S, 8] k, float[B, 2, S, 8] v, float[B, 1, S, S] m)
  => (float[B, 4, S, 8] o) {{
  o = ai.onnxopt.AttentionFused <num_heads = 4, kv_num_heads = 2, scale = 0.35,
      head_size = 8{attrs}> (q, k, v, m)
}}"""


def _feeds(rng, b=2, s=5):
    f = {"q": rng.standard_normal((b, 4, s, 8)), "k": rng.standard_normal((b, 2, s, 8)),
         "v": rng.standard_normal((b, 2, s, 8))}
    f = {k: (3 * v).astype(np.float32) for k, v in f.items()}  # large scores: the cap bites
    f["m"] = np.where(rng.random((b, 1, s, s)) < 0.3, -np.inf, 0).astype(np.float32)
    f["m"][..., 0] = 0  # no fully masked row
    return f


@pytest.mark.parametrize("softcap", [0.0, 2.0])
def test_decomposition_matches_the_reference(decompose, rng, softcap):
    attrs = f", softcap = {softcap}" if softcap else ""
    d = decompose(ATTENTION.format(attrs=attrs))
    assert ("Tanh" in d.ops) == bool(softcap)
    f = _feeds(rng)
    (o,) = d.run(**f)
    want = reference(f["q"], f["k"], f["v"], f["m"], num_heads=4, kv_num_heads=2, scale=0.35,
                     softcap=softcap)
    np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-5)


def test_the_cap_changes_the_result_and_keeps_masked_keys_masked(rng):
    f = _feeds(rng)
    plain = reference(f["q"], f["k"], f["v"], f["m"], scale=0.35)
    capped = reference(f["q"], f["k"], f["v"], f["m"], scale=0.35, softcap=2.0)
    assert np.abs(plain - capped).max() > 1e-2
    only_first = np.full_like(f["m"], -np.inf)
    only_first[..., 0] = 0
    first = reference(f["q"], f["k"], f["v"], only_first, scale=0.35, softcap=2.0)
    np.testing.assert_allclose(first, np.repeat(f["v"], 2, axis=1)[..., :1, :].repeat(5, axis=2),
                               rtol=1e-6)


PROBABILITIES = """
g (float[B, 4, S, 8] q, float[B, 2, S, 8] k, float[B, 2, S, 8] v, float[B, 1, S, S] m)
  => (float[B, 4, S, 8] o, float[B, 4, S, S] p) {{
  o, p = ai.onnxopt.AttentionFused <num_heads = 4, kv_num_heads = 2, scale = 0.35,
      head_size = 8{attrs}> (q, k, v, m)
}}"""


@pytest.mark.parametrize("nan_to_zero", [False, True])
def test_the_decomposition_outputs_the_probabilities(decompose, rng, nan_to_zero):
    """P: softmax(Q·Kᵀ·scale + mask) per query head (grouped K read by its kv head), NaN-guarded
    as O is; O is P·V."""
    d = decompose(PROBABILITIES.format(attrs=", nan_to_zero = 1" if nan_to_zero else ""))
    f = _feeds(rng)
    if nan_to_zero:
        f["m"][0, 0, 1] = -np.inf  # a row with every key masked: P is 0 there, not NaN
    o, p = d.run(**f)
    k = np.repeat(f["k"], 2, axis=1).astype(np.float64)
    scores = np.einsum("bhsd,bhtd->bhst", f["q"].astype(np.float64), k) * 0.35 + f["m"]
    with np.errstate(invalid="ignore"):
        want = np.exp(scores - scores.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
    if nan_to_zero:
        want = np.nan_to_num(want, nan=0.0)
        assert not np.isnan(p).any() and not p[0, :, 1].any()
    np.testing.assert_allclose(p, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(o, reference(f["q"], f["k"], f["v"], f["m"], num_heads=4,
                                            kv_num_heads=2, scale=0.35, nan_to_zero=nan_to_zero),
                               rtol=1e-5, atol=1e-5)
