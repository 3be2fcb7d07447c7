"""``ai.onnxopt.cuda::FlashAttention``: ``kernels/flash_attention.cu`` as an ORT custom op.

    O = FlashAttention(Q, K, V, bias?, kv_start?, kv_end?, causal_offset?)
        <scale: float, causal: int>

Q ``[B, H, Sq, D]``, K/V ``[B, Hkv, Skv, D]`` (BNSH, ``H % Hkv == 0``; rank 3 ``[B, S, D]`` is
one head), all float16, bfloat16 or float32, D a multiple of 8 up to 256; O like Q.
``bias`` (Q's dtype): an additive bias or mask broadcastable to ``[B, H, Sq, Skv]`` (ALiBi,
relative positions, padding as ``-inf``). ``kv_start``/``kv_end`` int32 ``[B]``: the visible
key range of each batch row (left and right padding). ``causal``: query i sees key
j <= i + off, with off = ``causal_offset[b]`` (int32 ``[B]``: key/value caches whose diagonal
is elsewhere) or ``Skv - Sq`` (bottom-right). Rows with no visible key give 0.

The node names no kernel specialisation and no tile: the CUDA kernel picks them at run time
from the device's real limits (``onnxopt.runtime.cuda.attention.select_variant``), so one
model runs on any GPU of compute capability 8.0 or newer. Every input stays on the device.
"""

from __future__ import annotations

import math

import numpy as np

from onnxopt import reference as ref
from onnxopt.runtime.cuda import flash_attention

from ._common import address, declare, dtype_name

FAMILY = "flash_attention"
OP = "FlashAttention"


def dims(q_shape, k_shape, v_shape) -> tuple[int, int, int, int, int, int]:
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
    return b, h, hkv, sq, skv, d


def _check_rows(batch: int, **rows) -> None:
    for name, t in rows.items():
        if t is not None and tuple(t.shape) != (batch,):
            raise ValueError(f"{name} must be [{batch}], got {list(t.shape)}")


def _bias4(bias, rank: int):
    """The bias's shape as seen by a rank-4 computation (rank-3 nodes are one head)."""
    shape = tuple(int(d) for d in bias.shape)
    if rank == 3 and len(shape) == 3:
        shape = (shape[0], 1, shape[1], shape[2])
    return shape


def attention_cpu(q, k, v, bias=None, kv_start=None, kv_end=None, causal_offset=None, *,
                  scale=0.0, causal=0):
    """The NumPy reference (float64), rounded to Q's dtype."""
    b, h, hkv, sq, skv, d = dims(q.shape, k.shape, v.shape)
    _check_rows(b, kv_start=kv_start, kv_end=kv_end, causal_offset=causal_offset)
    shape4, kv4 = (b, h, sq, d), (b, hkv, skv, d)
    extra = None
    if bias is not None:
        extra = np.asarray(bias, np.float64).reshape(_bias4(bias, q.ndim))
        np.broadcast_shapes(extra.shape, (b, h, sq, skv))  # raises when it does not broadcast
    out = ref.attention(np.asarray(q).reshape(shape4), np.asarray(k).reshape(kv4),
                        np.asarray(v).reshape(kv4), scale=scale or 1.0 / math.sqrt(d),
                        causal=bool(causal), kv_start=kv_start, kv_lens=kv_end,
                        causal_offset=causal_offset, bias=extra)
    return out.reshape(q.shape).astype(q.dtype)


def attention_shape(q, *_, **__):
    return [q.shape]


def attention_cuda(ctx, q, k, v, bias=None, kv_start=None, kv_end=None, causal_offset=None, *,
                   out, scale=0.0, causal=0):
    """One launch on ORT's stream: no allocation, no synchronisation."""
    b, h, hkv, sq, skv, d = dims(q.shape, k.shape, v.shape)
    _check_rows(b, kv_start=kv_start, kv_end=kv_end, causal_offset=causal_offset)
    if b == 0 or h == 0 or sq == 0:
        return
    flash_attention(q.ptr, k.ptr, v.ptr, out.ptr, b, h, hkv, sq, skv, d, scale or None,
                    bool(causal), dtype_name(q.dtype), ctx.stream, bias_ptr=address(bias),
                    bias_shape=() if bias is None else _bias4(bias, len(q.shape)),
                    kv_start_ptr=address(kv_start), kv_end_ptr=address(kv_end),
                    causal_offset_ptr=address(causal_offset))


declare(FAMILY, OP, cpu=attention_cpu, cuda=attention_cuda, shape=attention_shape)
