"""``ai.onnxopt.cuda::FlashAttention``: ``kernels/flash_attention.cu`` as an ORT custom op.

    O = FlashAttention(Q, K, V, kv_lens?, key_padding_mask?)
        <kernel: str, tile_m: int, tile_n: int, warps: int, scale: float, causal: int>

Q ``[B, H, Sq, D]``, K/V ``[B, Hkv, Skv, D]`` (BNSH, ``H % Hkv == 0``; rank 3 ``[B, S, D]`` is
one head), all float16, bfloat16 or float32; O like Q. ``kv_lens`` int32 ``[B]``: valid keys
per batch row (keys ``j >= kv_lens[b]`` are masked). ``key_padding_mask`` ``[B, Skv]`` (any
dtype, nonzero = keep), the mask ``kv_lens`` was computed from (``ReduceSum`` in the graph):
when present, every call checks that each row is right-padded, the only case in which
lengths and mask mean the same; a left-padded row or a hole raises. The CUDA kernel reads
this input from host memory (``on_cpu``), so the check costs no device synchronisation when
the mask is fed from the host; drop the input (``drop_padding_checks``) to keep every input
on the device, e.g. for CUDA-graph capture.

``kernel`` names the template specialisation (entry point of ``flash_attention.cu``, e.g.
``fa_tc_f16_d64_bm128_bn64``) chosen at selection; ``tile_m``/``tile_n``/``warps`` spell out its
tile for readers. ``causal`` is bottom-right aligned. Fully masked rows give 0.
"""

from __future__ import annotations

import math

import numpy as np

from onnxopt.runtime.cuda import flash_attention
from onnxopt.runtime.cuda import reference as ref
from onnxopt.runtime.registry import Port

from ._common import address, declare, dtype_name, right_padded_lengths

OP = "FlashAttention"
ATTRS = {"kernel": str, "tile_m": int, "tile_n": int, "warps": int, "scale": float, "causal": int}
INPUTS = [
    "Q: T",
    "K: T",
    "V: T",
    "kv_lens?: int32",
    Port("key_padding_mask", "any", optional=True, on_cpu=True),
]


def dims(q_shape, k_shape, v_shape, lens_shape=None) -> tuple[int, int, int, int, int, int]:
    """(B, H, Hkv, Sq, Skv, D) from the tensors' shapes; raises on anything the kernel
    cannot take (it only sees pointers and these integers)."""
    q_shape, k_shape, v_shape = (tuple(int(d) for d in s) for s in (q_shape, k_shape, v_shape))
    if not len(q_shape) == len(k_shape) == len(v_shape) or len(q_shape) not in (3, 4):
        raise ValueError(f"Q, K, V must all be rank 4 (BNSH) or rank 3, got {list(q_shape)}, "
                         f"{list(k_shape)}, {list(v_shape)}")
    if len(q_shape) == 3:
        q_shape, k_shape, v_shape = ((s[0], 1, s[1], s[2]) for s in (q_shape, k_shape, v_shape))
    b, h, sq, d = q_shape
    if k_shape != v_shape:
        raise ValueError(f"K {list(k_shape)} and V {list(v_shape)} must have one shape")
    bk, hkv, skv, dk = k_shape
    if bk != b or dk != d:
        raise ValueError(f"Q {list(q_shape)} and K {list(k_shape)} disagree on batch or head size")
    if h % hkv:
        raise ValueError(f"{h} query heads cannot share {hkv} key/value heads")
    if lens_shape is not None and tuple(lens_shape) != (b,):
        raise ValueError(f"kv_lens must be [{b}], got {list(lens_shape)}")
    return b, h, hkv, sq, skv, d


def _lengths(kv_lens, key_padding_mask, batch: int, keys: int):
    lens = None if kv_lens is None else np.asarray(kv_lens, np.int32)
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (batch, keys):
            raise ValueError(f"key_padding_mask must be [{batch}, {keys}], "
                             f"got {list(key_padding_mask.shape)}")
        checked = right_padded_lengths(key_padding_mask)
        if lens is None:
            lens = checked
    return lens


def attention_cpu(q, k, v, kv_lens=None, key_padding_mask=None, *, kernel="", tile_m=0,
                  tile_n=0, warps=0, scale=0.0, causal=0):
    """The NumPy reference (float64), rounded to Q's dtype."""
    b, h, hkv, sq, skv, d = dims(q.shape, k.shape, v.shape,
                                 None if kv_lens is None else kv_lens.shape)
    lens = _lengths(kv_lens, key_padding_mask, b, skv)
    shape4 = (b, h, sq, d)
    kv4 = (b, hkv, skv, d)
    out = ref.attention(np.asarray(q).reshape(shape4), np.asarray(k).reshape(kv4),
                        np.asarray(v).reshape(kv4), scale=scale or 1.0 / math.sqrt(d),
                        causal=bool(causal), kv_lens=lens)
    return out.reshape(q.shape).astype(q.dtype)


def attention_shape(q, k, v, kv_lens=None, key_padding_mask=None, **_):
    return [q.shape]


def attention_cuda(ctx, q, k, v, kv_lens=None, key_padding_mask=None, *, out, kernel="",
                   tile_m=0, tile_n=0, warps=0, scale=0.0, causal=0):
    """One launch on ORT's stream: no allocation, no synchronisation (the padding check reads
    a host-memory input)."""
    b, h, hkv, sq, skv, d = dims(q.shape, k.shape, v.shape,
                                 None if kv_lens is None else kv_lens.shape)
    if key_padding_mask is not None:
        if kv_lens is None:
            raise ValueError("key_padding_mask without kv_lens: the CUDA kernel reads lengths "
                             "from the device, computed in the graph")
        _lengths(None, key_padding_mask, b, skv)
    if b == 0 or h == 0 or sq == 0:
        return
    tile = kernel or ((tile_m, tile_n) if tile_m and tile_n else None)
    flash_attention(q.ptr, k.ptr, v.ptr, out.ptr, address(kv_lens), b, h, hkv, sq, skv, d,
                    scale or None, bool(causal), dtype_name(q.dtype), ctx.stream, tile=tile)


declare(OP, inputs=INPUTS, outputs=["O: T"], attrs=ATTRS, cpu=attention_cpu,
        cuda=attention_cuda, shape=attention_shape)
