"""The wrappers with memory and streams owned by PyCUDA or PyTorch (the primary context shared),
PyTorch's SDPA as a second opinion, and capture into a CUDA graph. Each test skips when its
library is missing."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt import reference as ref
from onnxopt.runtime import cuda as k

pytestmark = pytest.mark.gpu


def test_pycuda_primary_context_memory_and_stream():
    pytest.importorskip("pycuda")
    import pycuda.autoprimaryctx  # noqa: F401  (makes the primary context current)
    import pycuda.driver as drv
    from pycuda import gpuarray

    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 77, 64)).astype(np.float16)
    kv = rng.standard_normal((2, 1, 2, 90, 64)).astype(np.float16)
    q_g, k_g, v_g = gpuarray.to_gpu(q), gpuarray.to_gpu(kv[0]), gpuarray.to_gpu(kv[1])
    # NaN everywhere first, so an element the kernel never writes shows (PyCUDA's fill has no
    # float16 kernel: the NaN comes from the host)
    o_g = gpuarray.to_gpu(np.full(q.shape, np.nan, np.float16))
    stream = drv.Stream()
    k.flash_attention(
        int(q_g.gpudata),
        int(k_g.gpudata),
        int(v_g.gpudata),
        int(o_g.gpudata),
        1,
        4,
        2,
        77,
        90,
        64,
        None,
        True,
        "float16",
        stream.handle,
    )
    stream.synchronize()
    got = o_g.get().astype(np.float64)
    want = ref.attention(q, kv[0], kv[1], causal=True)
    assert np.abs(got - want).max() < 6e-3


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [32, 64, 80, 96, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_flash_attention_agrees_with_torch_sdpa(torch, dtype_name, d, causal, with_bias):
    import torch.nn.functional as F

    dtype = getattr(torch, dtype_name)
    b, h, hkv, s = 2, 8, 2, 1031
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=g)
    kk = torch.randn(b, hkv, s, d, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(b, hkv, s, d, device="cuda", dtype=dtype, generator=g)
    o = torch.full_like(q, float("nan"))
    # An ALiBi-style bias per head and key: SDPA takes it as a float attn_mask.
    bias = (torch.randn(1, h, 1, s, device="cuda", dtype=dtype, generator=g) if with_bias
            else None)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        k.flash_attention(
            q.data_ptr(),
            kk.data_ptr(),
            v.data_ptr(),
            o.data_ptr(),
            b,
            h,
            hkv,
            s,
            s,
            d,
            None,
            causal,
            dtype_name,
            stream.cuda_stream,
            bias_ptr=0 if bias is None else bias.data_ptr(),
            bias_shape=() if bias is None else tuple(bias.shape),
        )
    torch.cuda.current_stream().wait_stream(stream)
    # SDPA's causal mask is top-left aligned; with Sq == Skv that is the same as ours.
    want = F.scaled_dot_product_attention(
        q.float(),
        kk.repeat_interleave(h // hkv, 1).float(),
        v.repeat_interleave(h // hkv, 1).float(),
        attn_mask=_with_causal(torch, bias, s, causal),
        is_causal=causal and bias is None,
    )
    err = (o.float() - want).abs().max().item()
    assert err < (4e-2 if dtype_name == "bfloat16" else 6e-3), err


def _with_causal(torch, bias, s, causal):
    """SDPA takes either is_causal or attn_mask: fold causal into the float mask."""
    if bias is None:
        return None
    mask = bias.float()
    if causal:
        upper = torch.ones(s, s, device="cuda", dtype=torch.bool).triu(1)
        mask = mask.masked_fill(upper, float("-inf"))
    return mask


def test_cuda_graph_capture(torch):
    b, h, s, d = 1, 4, 300, 128
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    lens = torch.tensor([250], device="cuda", dtype=torch.int32)

    def launch():
        k.flash_attention(
            q.data_ptr(),
            q.data_ptr(),
            q.data_ptr(),
            o.data_ptr(),
            b,
            h,
            h,
            s,
            s,
            d,
            None,
            True,
            "bfloat16",
            torch.cuda.current_stream().cuda_stream,
            kv_end_ptr=lens.data_ptr(),
        )

    launch()  # load the module outside the capture
    torch.cuda.synchronize()
    first = o.clone()
    o.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(o, first)
