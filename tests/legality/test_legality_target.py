"""The target context: probed, not trusted; user options override."""

from __future__ import annotations

from onnxopt.legality.target import make_target
from onnxopt.runtime.cuda import probe


def test_default_device_follows_the_probe():
    target = make_target()
    assert target.device == ("cuda" if probe.device() is not None else "cpu")


def test_options_override():
    t = make_target("cuda", determinism="strict", ort_version="1.20", opset=23)
    assert (t.device, t.determinism, t.ort_version, t.opset) == ("cuda", "strict", (1, 20), 23)
    assert t.provider == "CUDAExecutionProvider"
    assert t.compute_capability >= (8, 0)
