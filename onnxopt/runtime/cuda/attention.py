"""Launch wrapper for ``kernels/flash_attention.cu`` (semantics: ``reference.attention``)."""

from __future__ import annotations

import functools
import math
from typing import Any

from . import driver, loader, metadata
from ._args import aligned, canonical_dtype, cdiv, check_positive, f32, i32, ptr

FAMILY = "flash_attention"


def select_variant(
    dtype: str,
    head_dim: int,
    *,
    sq: int | None = None,
    batch_heads: int | None = None,
    sm_count: int | None = None,
    tile: tuple[int, int] | str | None = None,
) -> dict[str, Any]:
    """The variant to launch: an explicit ``tile`` ((BM, BN) or an entry name) wins; otherwise the
    128-row tile, unless it would leave the GPU's multiprocessors without one block each, then
    the 64-row tile. A pure function of its arguments (unit-tested without a GPU); cached, so
    the returned dict is shared: do not modify it."""
    if tile is not None and not isinstance(tile, str):
        tile = tuple(int(t) for t in tile)
    return _select(canonical_dtype(dtype), head_dim, sq, batch_heads, sm_count, tile)


@functools.lru_cache(maxsize=1024)
def _select(dtype, head_dim, sq, batch_heads, sm_count, tile) -> dict[str, Any]:
    candidates = [
        v for v in metadata.variants(FAMILY) if v["dtype"] == dtype and v["head_dim"] == head_dim
    ]
    if not candidates:
        have = sorted({(v["dtype"], v["head_dim"]) for v in metadata.variants(FAMILY)})
        raise ValueError(
            f"flash_attention has no kernel for dtype {dtype} with head dim {head_dim}; "
            f"available: {have}"
        )
    if isinstance(tile, str):
        for v in candidates:
            if v["entry"] == tile:
                return v
        raise ValueError(f"{tile!r} is not a {dtype} head-dim {head_dim} variant")
    if tile is not None:
        for v in candidates:
            if (v["BM"], v["BN"]) == tile:
                return v
        tiles = sorted((v["BM"], v["BN"]) for v in candidates)
        raise ValueError(f"no {dtype} head-dim {head_dim} variant with tile {tile}; have {tiles}")
    candidates.sort(key=lambda v: -v["BM"])
    if sq is not None and batch_heads is not None and sm_count is not None:
        for v in candidates:
            if batch_heads * cdiv(sq, v["BM"]) >= sm_count:
                return v
        return candidates[-1]
    return candidates[0]


def flash_attention(
    q_ptr: int,
    k_ptr: int,
    v_ptr: int,
    o_ptr: int,
    lens_ptr: int,
    B: int,
    H: int,
    Hkv: int,
    Sq: int,
    Skv: int,
    D: int,
    scale: float | None = None,
    causal: bool = False,
    dtype: str = "float16",
    stream: int = 0,
    *,
    tile: tuple[int, int] | str | None = None,
) -> None:
    """O = softmax(Q K^T * scale + mask) V on device pointers, enqueued on ``stream``.

    q [B, H, Sq, D], k/v [B, Hkv, Skv, D], o [B, H, Sq, D]: contiguous BNSH, 16-byte aligned.
    lens_ptr: int32 [B] valid key lengths (key padding mask) or 0. causal is bottom-right
    aligned (query i sees keys j <= i + Skv - Sq). scale defaults to 1 / sqrt(D). stream: a
    CUstream / cudaStream_t handle as an int (0 = legacy default stream). Fully masked rows
    produce 0. No synchronisation, no allocation.
    """
    check_positive(B=B, H=H, Hkv=Hkv, D=D)
    if Sq < 0 or Skv < 0:
        raise ValueError(f"sequence lengths must be >= 0, got Sq={Sq}, Skv={Skv}")
    if H % Hkv:
        raise ValueError(f"query heads H={H} must be a multiple of kv heads Hkv={Hkv}")
    if H > 65535 or B > 65535:
        raise ValueError(f"grid limit: H={H} and B={B} must each be <= 65535")
    if not aligned(16, q_ptr, k_ptr, v_ptr, o_ptr) or not aligned(4, lens_ptr):
        raise ValueError("q, k, v and o must be 16-byte aligned (and lens 4-byte aligned)")
    if not (q_ptr and k_ptr and v_ptr and o_ptr):
        raise ValueError("q, k, v and o must be non-null device pointers")
    if Sq == 0:
        return
    dtype = canonical_dtype(dtype)
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    sm_count = driver.multiprocessor_count()
    v = select_variant(dtype, D, sq=Sq, batch_heads=B * H, sm_count=sm_count, tile=tile)
    kernel = loader.get(FAMILY, v["entry"])
    grid = (cdiv(Sq, v["BM"]), H, B)
    block = (32 * v["WARPS"], 1, 1)
    args = (
        ptr(q_ptr),
        ptr(k_ptr),
        ptr(v_ptr),
        ptr(o_ptr),
        ptr(lens_ptr),
        i32(H),
        i32(Hkv),
        i32(Sq),
        i32(Skv),
        f32(scale),
        i32(1 if causal else 0),
    )
    driver.launch(kernel.function, grid, block, args, kernel.smem, stream)
