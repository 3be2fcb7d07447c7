"""A mask probe that runs out of memory: a window's probe is some 17 M elements, more than a
process under a memory limit may have (fuzz run 61: a Gemma-2 mutant's probe in a worker
limited to 6 GB of address space gave an internal warning). The probe is a proof onnxopt
tries, not a step it needs: out of memory, the mask's structure is not claimed, with a
reason, and the run goes on."""

from __future__ import annotations

from onnxopt import ort_helper
from onnxopt.legality import mask
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.rules import attention


def test_a_probe_out_of_memory_is_a_reason(models_dir, monkeypatch):
    ask = ort_helper.ask

    def out_of_memory(fn, *args):
        if fn is mask._probe:
            raise MemoryError("Unable to allocate 128. MiB for an array")
        return ask(fn, *args)

    reasons = []
    classify = attention.classify_mask

    def recording(*args):
        info = classify(*args)
        reasons.append(info.reason)
        return info

    monkeypatch.setattr(ort_helper, "ask", out_of_memory)
    monkeypatch.setattr(attention, "classify_mask", recording)
    result = run_pipeline(str(models_dir / "mistral_sw.dynamo.onnx"),
                          OptimizeOptions(target="cpu"))
    assert reasons and {getattr(r, "code", None) for r in reasons} == {"mask_probe_out_of_memory"}
    assert result.proto is not None


def test_masked_positions_are_found_in_the_masks_own_float_type():
    import numpy as np

    for dtype in (np.float16, np.float32):
        values = np.array([[0, -1e4, np.finfo(dtype).min, 0]], dtype)
        assert mask._masked(values).reshape(-1).tolist() == [False, True, True, False]
    assert mask._masked(np.array([[0, -5.0]], np.float32)) is None
