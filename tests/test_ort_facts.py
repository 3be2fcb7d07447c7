"""The IR version ceiling is ORT's own: read from its refusal, confirmed by a load, and tried
version by version where the refusal does not say it. The ORT helper hands the parent the
same facts this process finds for itself."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from onnxopt import ort_facts, ort_helper
from onnxopt.exporter import versions


def _highest_loaded() -> int:
    for ir in range(16, 6, -1):
        try:
            ort.InferenceSession(ort_facts.tiny_model(ir).SerializeToString(),
                                 providers=["CPUExecutionProvider"])
            return ir
        except Exception:  # noqa: BLE001, S112 - refused: one lower
            continue
    raise AssertionError("ORT loads no IR version from 7 to 16")


def test_the_ceiling_is_the_highest_version_ort_loads():
    assert ort_facts.probe_max_ir_version() == _highest_loaded()


def test_the_helper_finds_the_same_facts_as_this_process():
    found = ort_helper.facts()
    assert found == ort_facts.RuntimeFacts(ort.__version__, _highest_loaded())
    assert versions.ort_max_ir_version() == found.max_ir_version


def test_the_exporter_never_writes_above_the_ceiling():
    ceiling = versions.ort_max_ir_version()
    assert versions.choose_ir_version(ceiling + 5, 13) == ceiling
    assert versions.choose_ir_version(7, 13) == 7  # the model's own, where ORT reads it
    assert versions.choose_ir_version(3, 17) == versions.min_ir_for_opset(17)


@pytest.mark.parametrize("says", ["nothing", "a maximum it refuses"])
def test_a_refusal_that_does_not_say_is_probed_down(monkeypatch, says):
    real = ort.InferenceSession
    highest = _highest_loaded()
    tried = []

    def session(data, **kwargs):
        from onnx import ModelProto

        ir = ModelProto.FromString(data).ir_version
        tried.append(ir)
        if ir == ort_facts._ABOVE_ANY_IR:
            raise RuntimeError("refused" if says == "nothing" else
                               f"max supported IR version: {highest + 1}")
        return real(data, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", session)
    assert ort_facts.probe_max_ir_version() == highest
    assert tried[-1] == highest and 16 in tried  # the versions were tried from the top
