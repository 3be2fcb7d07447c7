"""onnxopt.reference is the one NumPy definition each fused op's reference and each CUDA kernel's
CPU implementation compute with: where their contracts meet they agree, and where they differ
(the fused op's NaN rows, the kernel's bias floor) the difference is the stated one."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt import reference as ref
from onnxopt.ops.activations import reference_gelu, reference_silu, reference_swiglu
from onnxopt.ops.attention import reference as attention_op
from onnxopt.ops.group_norm import reference_group_norm
from onnxopt.ops.norms import reference_layer_norm, reference_rms_norm
from onnxopt.ops.rotary import reference as rotary_op


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_attention_with_a_mask_is_the_kernel_with_that_bias(rng):
    q = rng.standard_normal((2, 4, 5, 8))
    k, v = rng.standard_normal((2, 2, 5, 8)), rng.standard_normal((2, 2, 5, 8))
    causal = np.where(ref.attention_mask(5, 5, causal=True), 0.0, -np.inf)
    fused = attention_op(q, k, v, causal, num_heads=4, kv_num_heads=2, scale=0.3)
    np.testing.assert_allclose(fused, ref.attention(q, k, v, scale=0.3, causal=True),
                               rtol=1e-12, atol=1e-12)


def test_a_row_with_no_visible_key_is_nan_for_the_op_unless_guarded(rng):
    q, k, v = (rng.standard_normal((1, 1, 3, 4)) for _ in range(3))
    mask = np.zeros((1, 1, 3, 3))
    mask[0, 0, 1] = -np.inf
    plain = attention_op(q, k, v, mask, scale=0.5)
    assert np.isnan(plain[0, 0, 1]).all() and np.isfinite(plain[0, 0, [0, 2]]).all()
    guarded = attention_op(q, k, v, mask, scale=0.5, nan_to_zero=1)
    assert (guarded[0, 0, 1] == 0).all()
    np.testing.assert_array_equal(guarded[0, 0, [0, 2]], plain[0, 0, [0, 2]])
    kernel = ref.attention(q, k, v, scale=0.5, bias=mask)  # the kernel always writes 0 there
    np.testing.assert_array_equal(kernel, guarded)


def test_the_kernel_floors_a_finite_bias_the_op_does_not(rng):
    q, k, v = (rng.standard_normal((1, 1, 1, 4)) for _ in range(3))
    k, v = np.repeat(k, 2, axis=2), rng.standard_normal((1, 1, 2, 4))
    bias = np.array([-1e31, -1e35]).reshape(1, 1, 1, 2)
    op = attention_op(q, k, v, bias)  # the key at -1e31 wins outright
    np.testing.assert_allclose(op[0, 0, 0], v[0, 0, 0], rtol=1e-12)
    kernel = ref.attention(q, k, v, scale=1.0, bias=bias)  # both keys at the floor: even
    np.testing.assert_allclose(kernel[0, 0, 0], v[0, 0].mean(axis=0), rtol=1e-12)


def test_rank_3_attention_is_one_head(rng):
    q, k, v = (rng.standard_normal((2, 5, 4)) for _ in range(3))
    mask = rng.standard_normal((2, 5, 5))
    three = ref.attention(q, k, v, bias=mask, scale=0.5)
    four = ref.attention(q[:, None], k[:, None], v[:, None], bias=mask[:, None], scale=0.5)
    np.testing.assert_array_equal(three, four[:, 0])


def test_the_norms_activations_and_rotary_of_the_ops_are_the_references(rng):
    x, r = rng.standard_normal((2, 3, 16)), rng.standard_normal((2, 3, 16))
    g, b = rng.standard_normal(16), rng.standard_normal(16)
    y, s = reference_layer_norm(x, g, b, r, epsilon=1e-3, has_residual=1)
    want_y, want_s = ref.layer_norm(x, g, b, eps=1e-3, residual=r)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(s, want_s)
    np.testing.assert_array_equal(reference_rms_norm(x, g), ref.rms_norm(x, g, eps=1e-6)[0])
    images = rng.standard_normal((2, 8, 3, 3))
    np.testing.assert_array_equal(reference_group_norm(images, groups=4, activation="silu"),
                                  ref.group_norm(images, groups=4, activation="silu"))
    np.testing.assert_array_equal(reference_gelu(x, b, approximate="tanh"),
                                  ref.gelu(x, b, approximate="tanh"))
    np.testing.assert_array_equal(reference_silu(x, alpha=1.702), ref.silu(x, alpha=1.702))
    np.testing.assert_array_equal(reference_swiglu(x, r), ref.swiglu(x, r))
    cos, sin = rng.standard_normal((3, 8)), rng.standard_normal((3, 8))
    np.testing.assert_array_equal(rotary_op(x, cos, sin, rotary_dim=8, interleaved=1),
                                  ref.rotary(x, cos, sin, rotary_dim=8, interleaved=True))


def test_the_ops_keep_their_inputs_dtype():
    x = np.linspace(-2, 2, 16, dtype=np.float16).reshape(2, 8)
    assert reference_layer_norm(x).dtype == np.float16
    assert reference_gelu(x).dtype == np.float16
    assert ref.gelu(x).dtype == np.float64
