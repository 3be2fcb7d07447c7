"""RotaryFused: rotate-half and interleaved, whole head or partial, against the reference."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.ops.rotary import reference

ROPE = """
g (float[batch, 4, seq, 16] x, float[1, 1, seq, {d}] cos, float[1, 1, seq, {d}] sin)
    => (float[batch, 4, seq, 16] y) {{
    y = ai.onnxopt.RotaryFused (x, cos, sin) <interleaved = {interleaved}, rotary_dim = {rd}>
}}
"""


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 8])
def test_rotary_decomposition(decompose, rng, interleaved, rotary_dim):
    d_rot = rotary_dim or 16
    dec = decompose(ROPE.format(d=d_rot, interleaved=interleaved, rd=rotary_dim))
    assert "Neg" in dec.ops and dec.ops.count("Concat") == 1 + bool(rotary_dim)
    assert ("Reshape" in dec.ops) == bool(interleaved)
    x = rng.standard_normal((2, 4, 5, 16)).astype(np.float32)
    angles = rng.standard_normal((1, 1, 5, d_rot))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    (y,) = dec.run(x=x, cos=cos, sin=sin)
    ref = reference(x, cos, sin, interleaved=interleaved, rotary_dim=rotary_dim)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_reference_rotates_pairs():
    """With cos 0 and sin 1 rotate-half maps (a, b) to (-b, a); cos 1, sin 0 is the identity."""
    x = np.arange(1.0, 5.0).reshape(1, 4)
    ones, zeros = np.ones((1, 4)), np.zeros((1, 4))
    np.testing.assert_array_equal(reference(x, zeros, ones), [[-3, -4, 1, 2]])
    np.testing.assert_array_equal(reference(x, zeros, ones, interleaved=1), [[-2, 1, -4, 3]])
    np.testing.assert_array_equal(reference(x, ones, zeros), x)
