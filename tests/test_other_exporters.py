"""Models in other exporters' shapes (``models/other/``): each comes out loadable, equal and
no heavier (in tensor bytes and on disk); both branches of a merged decoder are fused and compared.

The models: an opset-11 TorchScript CNN, a tf2onnx-style graph, a TorchScript STFT
front-end with reflect padding inside and outside an ``If``, a weight-only int8 model,
and Hugging Face Optimum's merged KV-cache decoders (GPT-2, LLaMA).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxopt.importer.load import tensor_bytes

OTHER = Path(__file__).resolve().parent.parent / "models" / "other"
# models/other/merged/: merged decoders joined from real exports (models/export.py merged).
MODELS = sorted(OTHER.glob("*.onnx")) + sorted(OTHER.glob("merged/*.onnx"))


@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_optimized_model_loads_verifies_and_is_no_heavier(path, target, tmp_path, cli,
                                                          file_hash):
    before = file_hash(path)
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    rc, _, err = cli("optimize", path, "-o", out, "--verify", "-q", "--target", target,
                     "--json", report)
    assert (rc, err) == (0, "")
    assert file_hash(path) == before
    data = json.loads(report.read_text())
    assert data["verify"]["ok"]
    assert data["safeguard"] == {"checks": "passed"}
    optimized, original = onnx.load(out), onnx.load(path)
    assert tensor_bytes(optimized) <= tensor_bytes(original)
    assert out.stat().st_size <= path.stat().st_size  # the file as a whole, names and all
    assert [(i.domain, i.version) for i in original.opset_import if i.domain == ""] == \
        [(i.domain, i.version) for i in optimized.opset_import if i.domain == ""]
    if target == "cpu":
        ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", ["merged_decoder_gpt2", "merged_decoder_llama"])
def test_merged_decoder_fuses_attention_in_both_branches(name, tmp_path, cli):
    report = tmp_path / "report.json"
    rc, _, err = cli("optimize", OTHER / f"{name}.onnx", "-o", tmp_path / "o.onnx", "-q",
                     "--target", "cpu", "--verify", "--json", report)
    assert (rc, err) == (0, "")
    data = json.loads(report.read_text())
    assert data["fuse"]["summary"]["attention"]["fused"] == 4  # 2 layers x 2 branches
    assert data["fuse"]["summary"]["attention"]["refused"] == 0
    # verify ran the with-cache branch and the without-cache branch
    flags = {run["use_cache_branch"] == [1] for run in data["verify"]["runs"]}
    assert len(data["verify"]["runs"]) >= 2 and flags == {True}


def test_merged_decoder_branches_both_compared(tmp_path):
    """The runs alternate the branch switch: one with the cache, one without."""
    import onnxopt
    from onnxopt.verification import verify_models

    src = OTHER / "merged_decoder_gpt2.onnx"
    opt = onnxopt.optimize(str(src), target="cpu")
    seen = []
    original_run = ort.InferenceSession.run

    def spy(self, names, feeds, *args, **kwargs):
        if "use_cache_branch" in feeds:
            seen.append(bool(feeds["use_cache_branch"].reshape(-1)[0]))
        return original_run(self, names, feeds, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ort.InferenceSession, "run", spy)
        assert verify_models(str(src), opt, runs=2).ok
    assert True in seen and False in seen


def test_reflect_pad_front_end_verifies_at_a_length_it_accepts(tmp_path, cli):
    """Its reflect Pad needs more than 32 samples: verify finds a longer length rather than
    failing the (correct) result; with --inputs it uses exactly the user's."""
    src = OTHER / "stft_reflect_if.onnx"
    report = tmp_path / "r.json"
    rc, _, err = cli("optimize", src, "-o", tmp_path / "o.onnx", "-q", "--verify",
                     "--json", report)
    assert (rc, err) == (0, "")
    runs = json.loads(report.read_text())["verify"]["runs"]
    assert all(run["audio"][1] > 32 for run in runs)
    feeds = tmp_path / "audio.npz"
    np.savez(feeds, audio=np.random.default_rng(0).standard_normal((2, 300)).astype(np.float32))
    rc, _, err = cli("verify", src, tmp_path / "o.onnx", "--inputs", feeds, "--json", report)
    assert (rc, err) == (0, "")
    data = json.loads(report.read_text())
    assert data["inputs"] == [str(feeds)] and data["runs"] == [{"audio": [2, 300]}]
