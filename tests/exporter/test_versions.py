"""The IR version ceiling is ORT's own: read from its refusal, confirmed by a load, and tried
version by version where the refusal does not say it."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from onnxopt.exporter import versions


@pytest.fixture(autouse=True)
def _fresh_probe():
    versions.ort_max_ir_version.cache_clear()
    yield
    versions.ort_max_ir_version.cache_clear()


def _highest_loaded() -> int:
    for ir in range(16, 6, -1):
        try:
            ort.InferenceSession(versions._tiny_model(ir).SerializeToString(),
                                 providers=["CPUExecutionProvider"])
            return ir
        except Exception:  # noqa: BLE001, S112 - refused: one lower
            continue
    raise AssertionError("ORT loads no IR version from 7 to 16")


def test_the_ceiling_is_the_highest_version_ort_loads():
    assert versions.ort_max_ir_version() == _highest_loaded()


@pytest.mark.parametrize("says", ["nothing", "a maximum it refuses"])
def test_a_refusal_that_does_not_say_is_probed_down(monkeypatch, says):
    real = ort.InferenceSession
    highest = _highest_loaded()
    tried = []

    def session(data, **kwargs):
        from onnx import ModelProto

        ir = ModelProto.FromString(data).ir_version
        tried.append(ir)
        if ir == versions._ABOVE_ANY_IR:
            raise RuntimeError("refused" if says == "nothing" else
                               f"max supported IR version: {highest + 1}")
        return real(data, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", session)
    assert versions.ort_max_ir_version() == highest
    assert tried[-1] == highest and 16 in tried  # the versions were tried from the top
