"""Sliding-window and local attention: the mask probe proves a band, the fused op carries it.

Masks built from position comparisons as exporters write them (``Range``, ``Sub`` of the
window, ``Less``/``Greater``), with key padding from a ``[batch, seq]`` input: a causal band
``i - w <= j <= i``, a symmetric band ``|i - j| <= w``; and what is not such a band, refused
with the exact reason.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt import normalize
from onnxopt.importer import import_model
from onnxopt.legality.mask import REACH_CAP
from onnxopt.legality.target import run_target
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import fuse_and_settle, run_pipeline
from onnxopt.verification import verify_models

# ``hidden`` is built by the lines of each case from i [S, 1], j [1, S] and the constants.
BAND = """
g (float[batch, 4, seq, 16] q, float[batch, 4, seq, 16] k, float[batch, 4, seq, 16] v,
   int64[batch, seq] attention_mask) => (float[batch, 4, seq, 16] o) {{
    shape = Shape (q)
    two = Constant <value = int64 {{2}}> ()
    n = Gather (shape, two)
    zero = Constant <value = int64 {{0}}> ()
    one = Constant <value = int64 {{1}}> ()
    r = Range (zero, n, one)
    ax0 = Constant <value = int64[1] {{0}}> ()
    ax1 = Constant <value = int64[1] {{1}}> ()
    i = Unsqueeze (r, ax1)
    j = Unsqueeze (r, ax0)
    w = Constant <value = int64 {{{w}}}> ()
    w2 = Constant <value = int64 {{{w2}}}> ()
    before = Sub (i, w)
    after = Add (i, w2)
    {hidden}
    izero = Constant <value = int64 {{0}}> ()
    pad = Equal (attention_mask, izero)
    ax12 = Constant <value = int64[2] {{1, 2}}> ()
    pad4 = Unsqueeze (pad, ax12)
    masked = Or (hidden, pad4)
    big = Constant <value = float {{-1e9}}> ()
    nil = Constant <value = float {{0}}> ()
    m = Where (masked, big, nil)
    kt = Transpose <perm = [0, 1, 3, 2]> (k)
    s = MatMul (q, kt)
    c = Constant <value = float {{0.25}}> ()
    ss = Mul (s, c)
    a = Add (ss, m)
    p = Softmax <axis = -1> (a)
    o = MatMul (p, v)
}}
"""

NOT_CARRIED = ("the mask is a band with different widths before and after the query (neither "
               "causal nor symmetric)")

# keys hidden before the band (j < i - w) and after it (j > i + w2)
TWO_SIDED = """far = Less (j, before)
    ahead = Greater (j, after)
    hidden = Or (far, ahead)"""


def _fused_node(proto):
    model = import_model(proto)
    options = OptimizeOptions(target="cpu")
    normalize.run(model, options)
    fuse_and_settle(model, options, run_target(options, model.opset))
    return [n for n in model.graph if n.op_type == "AttentionFused"]


def _regions(proto):
    result = run_pipeline(proto, OptimizeOptions(target="cpu"))
    return result, [r for r in result.report.stages["fuse"].regions if r.rule == "attention"]


@pytest.mark.parametrize("w, w2, causal, kind", [
    (3, 0, True, "causal+key_padding+window"),       # Mistral: i - 3 <= j <= i
    (20, 0, True, "causal+key_padding+window"),      # past the fixed probes: one probe more
    (2, 2, False, "key_padding+window"),             # ModernBERT: |i - j| <= 2
    (12, 12, False, "key_padding+window"),
])
def test_a_band_is_proved_and_carried(make_model, w, w2, causal, kind):
    proto = make_model(BAND.format(w=w, w2=w2, hidden=TWO_SIDED))
    (node,) = _fused_node(proto)
    assert node.attr("mask_kind") == kind
    assert node.attr("window") == w and node.attr("causal") == int(causal)
    result, regions = _regions(proto)
    assert [r.status for r in regions] == ["fused"]
    assert f"(window {w})" in regions[0].detail
    assert verify_models(proto, result.proto).ok


TRILU_BAND = """
g (float[batch, 4, seq, 16] q, float[batch, 4, seq, 16] k, float[batch, 4, seq, 16] v)
  => (float[batch, 4, seq, 16] o) {{
    shape = Shape (q)
    two = Constant <value = int64[1] {{2}}> ()
    three = Constant <value = int64[1] {{3}}> ()
    n = Slice (shape, two, three)
    square = Concat <axis = 0> (n, n)
    ones = ConstantOfShape <value = float[1] {{1}}> (square)
    w = Constant <value = int64 {{{w}}}> ()
    below = Trilu <upper = 0> (ones)
    band = Trilu <upper = 1> (below, w)
    zero = Constant <value = float {{0}}> ()
    hidden = Equal (band, zero)
    big = Constant <value = float {{-1e9}}> ()
    m = Where (hidden, big, zero)
    kt = Transpose <perm = [0, 1, 3, 2]> (k)
    s = MatMul (q, kt)
    c = Constant <value = float {{0.25}}> ()
    ss = Mul (s, c)
    a = Add (ss, m)
    p = Softmax <axis = -1> (a)
    o = MatMul (p, v)
}}
"""


@pytest.mark.parametrize("w", [-3, -20])
def test_a_band_of_triangles_is_proved(make_model, w):
    """``triu(tril(ones), -w)``: the window is Trilu's ``k``, probed past as any constant."""
    proto = make_model(TRILU_BAND.format(w=w))
    (node,) = _fused_node(proto)
    assert node.attr("mask_kind") == "causal+window" and node.attr("window") == -w
    result, _ = _regions(proto)
    assert verify_models(proto, result.proto).ok


def test_a_window_wider_than_every_probe_cap_claims_nothing(make_model):
    """A window too long to probe past: the probes see a triangle, but a triangle is what a
    band looks like below its width, so no structure is claimed; the mask stays the exact
    additive function (no causal kernel may drop it)."""
    proto = make_model(BAND.format(w=REACH_CAP * 4, w2=0, hidden=TWO_SIDED))
    (node,) = _fused_node(proto)
    assert node.attr("mask_kind") == "additive" and node.attr("causal") == 0
    assert node.attr("window") == 0
    result, _ = _regions(proto)
    assert verify_models(proto, result.proto).ok


def test_a_plain_causal_mask_has_no_window(make_model):
    proto = make_model(BAND.format(w=0, w2=0, hidden="hidden = Greater (j, after)"))
    (node,) = _fused_node(proto)
    assert node.attr("mask_kind") == "causal+key_padding" and node.attr("window") == 0


@pytest.mark.parametrize("w, w2, hidden, code, reason", [
    # the band on the wrong side: j - 3 <= i <= j (keys after the query)
    (0, 3, TWO_SIDED, "mask_band_not_carried",
     NOT_CARRIED),
    # one width before, another after
    (3, 1, TWO_SIDED, "mask_band_not_carried",
     NOT_CARRIED),
    # a window that grows with the row (i - i // 2 <= j <= i): rows of different widths
    (2, 0, """half = Div (i, w)
    start = Sub (i, half)
    far = Less (j, start)
    ahead = Greater (j, i)
    hidden = Or (far, ahead)""", "mask_not_causal",
     "the mask is built like a causal mask but is not causal"),
    # a triangle on the wrong side: keys after the query, all of them
    (0, 0, "hidden = Less (j, i)", "mask_not_causal",
     "the mask is built like a causal mask but is not causal"),
])
def test_what_is_not_a_band_is_refused(make_model, w, w2, hidden, code, reason):
    proto = make_model(BAND.format(w=w, w2=w2, hidden=hidden))
    result, regions = _regions(proto)
    assert [(r.status, r.code, r.detail) for r in regions] == [("refused", code, f"%m: {reason}")]
    assert verify_models(proto, result.proto).ok


# --- a sliding-window Mistral, both exporters (models/mistral_sw.*: window 6 keys) ---------------

SLIDING_WINDOW = 6  # models/export.py: MistralConfig(sliding_window=6), i - 6 < j <= i


def _text_feeds(batch: int, seq: int, pad: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed + seq)
    mask = np.ones((batch, seq), np.int64)
    if pad == "right":
        mask[1:, seq - max(1, seq // 3):] = 0
    elif pad == "left":
        mask[1:, : max(1, seq // 3)] = 0
    return {"input_ids": rng.integers(2, 1000, (batch, seq), dtype=np.int64),
            "attention_mask": mask}


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_sliding_window_mistral_fuses_every_block_with_its_window(models_dir, exporter):
    import onnx

    proto = onnx.load(str(models_dir / f"mistral_sw.{exporter}.onnx"))
    nodes = _fused_node(proto)
    assert len(nodes) == 2  # one per layer
    for node in nodes:
        assert node.attr("mask_kind") == "causal+key_padding+window"
        assert node.attr("window") == SLIDING_WINDOW - 1 and node.attr("causal") == 1


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_sliding_window_mistral_computes_the_original(models_dir, exporter):
    """Below the window (3, 5 tokens), above it (8, 16) and past where the query blocks start
    (300: the blocks skip the keys before the band): right and left padding."""
    import onnx

    from onnxopt.select.causal_blocks import MIN_SEQUENCE

    proto = onnx.load(str(models_dir / f"mistral_sw.{exporter}.onnx"))
    result, regions = _regions(proto)
    assert [r.status for r in regions] == ["fused", "fused"]
    chosen = result.report.stages["select"].chosen_counts()
    assert chosen.get("decompose.AttentionFused.causal_blocks") == 2, chosen
    original, optimized = (_session(p) for p in (proto, result.proto))
    for seq in (3, 5, 8, 16, MIN_SEQUENCE + 44):
        for pad in ("none", "right", "left"):
            feeds = _text_feeds(2, seq, pad)
            want = original.run(None, feeds)[0]
            got = optimized.run(None, feeds)[0]
            assert np.abs(got - want).max() / np.abs(want).max() < 1e-5, (seq, pad)


def _session(proto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def test_a_probe_past_the_window_too_large_to_run_claims_nothing(make_model, monkeypatch):
    """The probe past a window holds (planes x reach²) elements; above REACH_ELEMENTS it does
    not run, and the mask's structure is not claimed (it stays exact and additive)."""
    from onnxopt.legality import mask

    monkeypatch.setattr(mask, "REACH_ELEMENTS", 21 * 21)  # the window of 20 needs 22²
    (node,) = _fused_node(make_model(BAND.format(w=20, w2=0, hidden=TWO_SIDED)))
    assert node.attr("mask_kind") == "additive" and node.attr("window") == 0
