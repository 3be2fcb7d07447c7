"""Speech encoders (wav2vec2, HuBERT; both exporters): every attention block fuses although the
mask's length is the frame count the conv front end derives from the audio length, and the
feature extractor's GroupNorm with one group per channel fuses; outputs equal the original.

The TorchScript exports carry no shapes for the frame axis: shape inference proves it through
the convolutions (batch and channels; a "same" convolution keeps the length) and the mask's
flips (``Slice`` with step -1), so Q's, K's and V's frame counts are one symbol."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.verification import verify_models

MODELS = ["wav2vec2.dynamo", "hubert.dynamo", "wav2vec2.ts", "hubert.ts"]


def _audio(batch: int, samples: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, samples), np.int64)
    for row in range(1, batch):
        mask[row, samples - row * samples // 4:] = 0  # right padding, more on each row
    return {"input_values": rng.standard_normal((batch, samples)).astype(np.float32),
            "attention_mask": mask}


@pytest.mark.parametrize("name", MODELS)
def test_speech_encoder_attention_and_group_norm_fuse_and_compute_the_same(models_dir, name):
    path = str(models_dir / f"{name}.onnx")
    result = run_pipeline(path, OptimizeOptions(target="cpu", debug=True))
    fusion = result.report.stages["fuse"]
    assert fusion.count("attention") == result.report.nodes_before["Softmax"] == 2
    assert fusion.count("group_norm") == result.report.nodes_before["InstanceNormalization"] == 1
    assert fusion.count("gelu") == 5  # the front end's two, the positional conv's, two MLPs
    for family in ("attention", "group_norm", "layer_norm", "gelu"):
        assert fusion.count(family, "refused") == 0, fusion.summary().get(family)
    assert result.report.stages["exactness"].to_json()["refused"] == {}
    original = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    fused = ort.InferenceSession(result.proto.SerializeToString(),
                                 providers=["CPUExecutionProvider"])
    for batch, samples in ((2, 400), (3, 640), (1, 1000)):
        feeds = _audio(batch, samples, seed=samples)
        want = original.run(None, feeds)[0]
        got = fused.run(None, feeds)[0]
        assert got.shape == want.shape
        err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
        assert err < 1e-5, (batch, samples, err)


INSTANCE_NORM = """
g (float[batch, 8, len] x) => (float[batch, 8, len] y) {
    s = Constant <value = float[8] {1.5, 0.5, 1, 2, 1, 1, 0.25, 3}> ()
    b = Constant <value = float[8] {0, 0.1, 0, -1, 0, 0.5, 0, 2}> ()
    y = InstanceNormalization <epsilon = 1e-5> (x, s, b)
}
"""

GROUPED = """
g (float[batch, 8, len] x) => (float[batch, 8, len] y) {
    t = Constant <value = int64[3] {0, 2, -1}> ()
    xs = Reshape (x, t)
    s = Constant <value = float[2] {1, 1}> ()
    b = Constant <value = float[2] {0, 0}> ()
    n = InstanceNormalization <epsilon = 1e-5> (xs, s, b)
    sh = Shape (x)
    y = Reshape (n, sh)
}
"""


def test_instance_norm_with_per_channel_weights_is_a_group_norm_per_channel(make_model):
    proto = make_model(INSTANCE_NORM)
    result = run_pipeline(proto, OptimizeOptions(target="cpu", debug=True))
    regions = [r for r in result.report.stages["fuse"].regions if r.family == "group_norm"]
    assert [(r.rule, r.status) for r in regions] == [("group_norm_per_channel", "fused")]
    assert "one group per channel (8)" in regions[0].detail
    assert verify_models(proto, result.proto).ok


def test_the_grouped_spelling_stays_with_the_group_norm_rule(make_model):
    proto = make_model(GROUPED)
    result = run_pipeline(proto, OptimizeOptions(target="cpu", debug=True))
    regions = [r for r in result.report.stages["fuse"].regions if r.family == "group_norm"]
    assert [(r.rule, r.status) for r in regions] == [("group_norm", "fused")]
    assert "2 groups" in regions[0].detail
    assert verify_models(proto, result.proto).ok
