"""Models optimized for a CUDA target run through ``onnxopt.runtime.session`` on the CPU, where
the ai.onnxopt.cuda ops run as their reference kernels, and match the original model.

With no GPU here, ``OptimizeOptions(target="cuda")`` makes a target of compute capability 8.0
(make_target's default when no device answers), which every one of our kernels accepts.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxopt.evaluation.sizes import padding_mask
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.runtime import session
from onnxopt.runtime.ops import DOMAIN
from onnxopt.runtime.ops.examples import attention_feeds, attention_model
from onnxopt.verification.inputs import make_inputs


def ours(proto: onnx.ModelProto) -> list[str]:
    return sorted(n.op_type for n in proto.graph.node if n.domain == DOMAIN)


def original(model, feeds):
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, feeds)


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("kw", [
    {},  # GQA 8/2, causal + right padding, head 64
    {"heads": 4, "kv_heads": 4, "head_size": 128, "causal": False},
    {"padding": False},
], ids=["gqa-causal-padding", "d128-padding", "causal"])
def test_float16_attention_model(kw):
    model = attention_model(**kw)
    result = run_pipeline(model, OptimizeOptions(target="cuda"))
    assert ours(result.proto) == ["FlashAttention"]
    assert result.report.stages["select"].chosen_counts() == {"pycuda.flash_attention": 1}
    feeds = attention_feeds(model, 2, 37, pad=(0, 11) if kw.get("padding", True) else ())
    (got,) = session(result.proto).run(None, feeds)
    (want,) = original(model, feeds)
    assert rel_err(got, want) < 2e-3


@pytest.mark.parametrize("causal", [True, False])
def test_left_padding_and_holes_run(causal):
    """Batched generation pads on the left: the kernel takes per-row key ranges, and the
    padding as a bias, so left padding and holes compute the original function. A causal
    query that sees no key at all (row 1's first three) is 0; the original's value there
    depends on its mask constant, so only rows that see a key are compared."""
    model = attention_model(causal=causal)
    result = run_pipeline(model, OptimizeOptions(target="cuda"))
    assert ours(result.proto) == ["FlashAttention"]
    feeds = attention_feeds(model, 2, 12)
    feeds["attention_mask"][1, :3] = 0
    feeds["attention_mask"][0, 5] = 0  # a hole
    (got,) = session(result.proto).run(None, feeds)
    (want,) = original(model, feeds)
    if causal:
        assert (got[1, :, :3] == 0).all()
        got, want = got[:, :, 3:], want[:, :, 3:]
    assert rel_err(got, want) < 2e-3


@pytest.mark.parametrize("name, expected", [
    ("gpt2.ts", ["BiasGelu", "BiasGelu", "LayerNorm", "LayerNorm", "LayerNorm", "LayerNorm",
                 "LayerNorm"]),
    # head size 16: the float32 attention kernel takes it (buckets of 32, zero-padded)
    ("llama.dynamo", ["FlashAttention"] * 2 + ["RMSNorm"] * 5 + ["SwiGLU"] * 2),
])
def test_exported_models_float32(models_dir, name, expected):
    path = str(models_dir / f"{name}.onnx")
    result = run_pipeline(path, OptimizeOptions(target="cuda"))
    assert ours(result.proto) == expected
    # the residual add folded in, its sum the second output (the next block's residual)
    assert any(len(n.input) == 4 - (n.op_type == "RMSNorm") and len(n.output) == 2
               for n in result.proto.graph.node if n.domain == DOMAIN)
    feeds = make_inputs(onnx.load(path), {"batch": 2, "other": 13}, seed=0)
    # Right padding only: verification's masks also pad a row on the left, where a causal
    # query sees no key, and our attention kernel gives 0 there (not the model's average over
    # masked keys; see test_left_padding_and_holes_run).
    feeds["attention_mask"] = padding_mask(feeds["attention_mask"].shape)
    (got,) = session(result.proto).run(None, feeds)
    (want,) = original(path, feeds)
    assert rel_err(got, want) < 1e-5


@pytest.mark.parametrize("name", ["diffusion.ts", "diffusion.dynamo"])
def test_diffusion_group_norms_bind_to_our_kernel(models_dir, name):
    """Every GroupNorm (five with their SiLU) of the UNet block becomes ai.onnxopt.cuda::GroupNorm,
    and the model, run with the op's reference kernel, computes the original function."""
    path = str(models_dir / f"{name}.onnx")
    result = run_pipeline(path, OptimizeOptions(target="cuda"))
    assert ours(result.proto) == ["GroupNorm"] * 6
    silu = [n for n in result.proto.graph.node if n.op_type == "GroupNorm" and any(
        a.name == "activation" and a.s == b"silu" for a in n.attribute)]
    assert len(silu) == 5
    feeds = make_inputs(onnx.load(path), {"batch": 2}, seed=0)
    (got,) = session(result.proto).run(None, feeds)
    (want,) = original(path, feeds)
    assert rel_err(got, want) < 1e-5


def test_exported_model_float16(models_dir):
    float16 = pytest.importorskip("onnxconverter_common.float16")
    model = onnx.load(str(models_dir / "gpt2.ts.onnx"))
    del model.graph.value_info[:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        half = float16.convert_float_to_float16(model, keep_io_types=True)
    half.ir_version = 10
    # The converter keeps Cast(to=float) nodes while converting what follows them (ORT then
    # rejects the type clash): set them to float16, as tests/rules/test_precision_variants does.
    outputs = {o.name for o in half.graph.output}
    for node in half.graph.node:
        if node.op_type == "Cast" and not set(node.output) & outputs:
            for a in node.attribute:
                if a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                    a.i = onnx.TensorProto.FLOAT16
    result = run_pipeline(half, OptimizeOptions(target="cuda"))
    assert set(ours(result.proto)) == {"LayerNorm", "BiasGelu", "FlashAttention"}  # head 16 too
    feeds = make_inputs(half, {"batch": 2, "other": 13}, seed=0)
    feeds["attention_mask"] = padding_mask(feeds["attention_mask"].shape)  # (as above)
    (got,) = session(result.proto).run(None, feeds)
    (want,) = original(half, feeds)
    assert rel_err(got, want) < 5e-3
