"""decompose.AttentionFused.causal_blocks on bands (sliding-window and local attention).

A band's blocks read only the keys within ``window`` of their rows: exact where the mask is
the band it was proved to be, and (the proof that keys are skipped) different where a node
claims a band its mask does not hold.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.select.causal_blocks import MIN_SEQUENCE
from tests.select.test_causal_blocks import KERNEL, MIN

WINDOW = 40


def band_attention(causal: bool, window: int = WINDOW, padding: bool = True) -> str:
    kind = ("causal+" if causal else "") + ("key_padding+" if padding else "") + "window"
    extra = ", int64[B,S] am" if padding else ""
    return f"""
    g (float[B,4,S,8] q, float[B,2,S,8] k, float[B,2,S,8] v, float[B,1,S,S] m{extra})
      => (float[B,4,S,8] o) {{
      o = ai.onnxopt.AttentionFused <num_heads=4, kv_num_heads=2, scale=0.35, head_size=8,
            causal={int(causal)}, mask_kind="{kind}", window={window}>
            (q, k, v, m{", am" if padding else ""})
    }}"""


def band_feeds(b: int, s: int, causal: bool, window: int = WINDOW, pad: bool = True,
               seed: int = 0) -> dict:
    """Q/K/V and the band's additive mask (plus right padding on every row but the first)."""
    rng = np.random.default_rng(seed)
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    hidden = (j < i - window) | ((j > i) if causal else (j > i + window))
    keep = np.ones((b, s), np.int64)
    if pad:
        keep[1:, s - s // 7:] = 0
    masked = hidden[None, None] | (keep[:, None, None, :] == 0)
    return {"q": rng.standard_normal((b, 4, s, 8)).astype(np.float32),
            "k": rng.standard_normal((b, 2, s, 8)).astype(np.float32),
            "v": rng.standard_normal((b, 2, s, 8)).astype(np.float32),
            "m": np.where(masked, MIN, 0).astype(np.float32), "am": keep}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seq", [WINDOW - 9, MIN_SEQUENCE + 44, 3 * MIN_SEQUENCE + 5])
def test_band_blocks_match_the_decomposition(check_kernel, causal, seq):
    check_kernel(band_attention(causal), KERNEL, band_feeds(2, seq, causal))


def test_a_band_wider_than_the_sequence_is_causal(check_kernel):
    """A window past every key is no band at all: the blocks are the causal blocks."""
    seq = MIN_SEQUENCE + 3
    check_kernel(band_attention(True, window=4 * seq), KERNEL,
                 band_feeds(1, seq, True, window=4 * seq, pad=False))


def test_keys_outside_the_band_are_not_read(bind_text, rel_err):
    """A node that claims a band its (causal) mask does not hold: the blocks skip keys the
    mask shows, so the output differs from the decomposition's; the skipping is real."""
    text = band_attention(True, padding=False)
    f = band_feeds(1, MIN_SEQUENCE + 44, True, window=10 ** 6, pad=False)
    del f["am"]
    blocks = bind_text(text, KERNEL).run(f)[0]
    whole = bind_text(text, "decompose.AttentionFused").run(f)[0]
    assert rel_err(blocks, whole) > 1e-3



@pytest.mark.parametrize("causal", [True, False])
def test_ort_attention_takes_the_band_as_its_exact_mask(check_kernel, causal):
    """MultiHeadAttention (heads repeated for GQA) adds the band's exact additive mask like
    the decomposition: nothing is dropped, nothing to refuse."""
    check_kernel(band_attention(causal), "ort.MultiHeadAttention.repeat_kv",
                 band_feeds(2, 70, causal))


def test_onnx_attention_takes_the_band_as_its_exact_mask(check_kernel):
    check_kernel(band_attention(True), "onnx.Attention-23", band_feeds(2, 70, True), opset=23)
