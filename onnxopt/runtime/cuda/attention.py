"""Launch wrapper for ``kernels/flash_attention.cu`` (semantics: ``reference.attention``).

The tile is chosen here, at load time, from the device's real limits; models carry none, so a
model optimized on one GPU runs on any other (``select_variant``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from . import driver, launch_args, loader, metadata
from ._args import aligned, canonical_dtype, cdiv, check_positive
from .devices import DeviceLimits

FAMILY = "flash_attention"


def head_size_reason(dtype: str, head_dim: int) -> str | None:
    """None when some specialisation takes ``head_dim`` for ``dtype``, else why not."""
    meta = metadata.load(FAMILY)
    top, multiple = meta["max_head_size"], meta["head_size_multiple"]
    if head_dim <= 0 or head_dim > top or head_dim % multiple:
        return f"head size {head_dim} is not a multiple of {multiple} up to {top}"
    if not [v for v in metadata.variants(FAMILY) if v["dtype"] == canonical_dtype(dtype)]:
        return f"no {dtype} attention kernel"
    return None


def bucket(dtype: str, head_dim: int) -> list[dict[str, Any]]:
    """The variants of the smallest head-dim bucket (DMAX) that holds ``head_dim``, largest
    tile first."""
    dtype = canonical_dtype(dtype)
    reason = head_size_reason(dtype, head_dim)
    if reason:
        raise ValueError(f"flash_attention: {reason}")
    options = [v for v in metadata.variants(FAMILY) if v["dtype"] == dtype
               and v["DMAX"] >= head_dim]
    dmax = min(v["DMAX"] for v in options)
    return sorted((v for v in options if v["DMAX"] == dmax), key=lambda v: (-v["BM"], -v["BN"]))


def select_variant(dtype: str, head_dim: int, limits: DeviceLimits, *, sq: int | None = None,
                   batch_heads: int | None = None, tile: tuple[int, int] | None = None
                   ) -> dict[str, Any]:
    """The variant to launch on a device with ``limits``: the tiles of ``head_dim``'s bucket
    that fit its shared memory, the 128-row one unless it would leave multiprocessors without
    a block (then the next smaller). An explicit ``tile`` (BM, BN) wins when it fits. Never
    fails while any tile fits: every bucket's smallest tile fits the 99 KiB of the smallest
    GPU (tests). A pure function of its arguments (cached; do not modify the result)."""
    return _select(canonical_dtype(dtype), head_dim, limits, sq, batch_heads,
                   None if tile is None else tuple(int(t) for t in tile))


@functools.lru_cache(maxsize=1024)
def _select(dtype, head_dim, limits, sq, batch_heads, tile) -> dict[str, Any]:
    options = bucket(dtype, head_dim)
    fitting = [v for v in options if metadata.smem_bytes(FAMILY, v) <= limits.smem_optin]
    if not fitting:
        smallest = options[-1]
        raise loader.KernelUnsupported(
            f"{smallest['entry']} needs {metadata.smem_bytes(FAMILY, smallest)} bytes of shared "
            f"memory, the device allows {limits.smem_optin}")
    if tile is not None:
        for v in fitting:
            if (v["BM"], v["BN"]) == tile:
                return v
        tiles = sorted((v["BM"], v["BN"]) for v in fitting)
        raise ValueError(f"no {dtype} head-dim {head_dim} variant with tile {tile} fits; "
                         f"have {tiles}")
    if sq is not None and batch_heads is not None and limits.sm_count:
        for v in fitting:
            if batch_heads * cdiv(sq, v["BM"]) >= limits.sm_count:
                return v
        return fitting[-1]
    return fitting[0]


def bias_strides(shape: tuple[int, ...], full: tuple[int, int, int, int]) -> tuple[int, ...]:
    """Element strides (b, h, q, k) of a contiguous bias of ``shape`` broadcast to ``full``
    ([B, H, Sq, Skv]): 0 on an axis of size 1 (or one the bias lacks). Raises when the bias
    does not broadcast."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > 4:
        raise ValueError(f"the bias has rank {len(shape)}; at most 4 ([B, H, Sq, Skv])")
    padded = (1,) * (4 - len(shape)) + shape
    strides, step = [0, 0, 0, 0], 1
    for axis in range(3, -1, -1):
        size = padded[axis]
        if size != 1 and size != full[axis]:
            raise ValueError(f"a bias of shape {list(shape)} does not broadcast to {list(full)}")
        strides[axis] = step if size != 1 else 0
        step *= size
    return tuple(strides)


def flash_attention(
    q_ptr: int,
    k_ptr: int,
    v_ptr: int,
    o_ptr: int,
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
    bias_ptr: int = 0,
    bias_shape: tuple[int, ...] = (),
    kv_start_ptr: int = 0,
    kv_end_ptr: int = 0,
    causal_offset_ptr: int = 0,
    tile: tuple[int, int] | None = None,
    window: int = 0,
) -> None:
    """O = softmax(Q K^T * scale + bias + mask) V on device pointers, enqueued on ``stream``.

    q [B, H, Sq, D], k/v [B, Hkv, Skv, D], o [B, H, Sq, D]: contiguous BNSH, 16-byte aligned;
    D a multiple of 8 up to 256. bias (dtype of q, contiguous, ``bias_shape`` broadcastable to
    [B, H, Sq, Skv]) or 0. kv_start / kv_end: int32 [B] visible key range per batch row (left
    and right padding) or 0. causal: query i sees key j <= i + off, off = causal_offset[b]
    (int32 [B]) or Skv - Sq. window > 0: a band, query i sees only keys with
    ``|i + off - j| <= window`` (and ``j <= i + off`` when causal); key tiles outside the band
    are skipped. scale defaults to 1 / sqrt(D). stream: a CUstream /
    cudaStream_t handle as an int. Rows with no visible key produce 0. No synchronisation,
    no allocation.
    """
    check_positive(B=B, H=H, Hkv=Hkv, D=D)
    if Sq < 0 or Skv < 0:
        raise ValueError(f"sequence lengths must be >= 0, got Sq={Sq}, Skv={Skv}")
    if H % Hkv:
        raise ValueError(f"query heads H={H} must be a multiple of kv heads Hkv={Hkv}")
    if H > 65535 or B > 65535:
        raise ValueError(f"grid limit: H={H} and B={B} must each be <= 65535")
    if not aligned(16, q_ptr, k_ptr, v_ptr, o_ptr):
        raise ValueError("q, k, v and o must be 16-byte aligned")
    if not aligned(4, kv_start_ptr, kv_end_ptr, causal_offset_ptr):
        raise ValueError("kv_start, kv_end and causal_offset must be 4-byte aligned")
    if not (q_ptr and k_ptr and v_ptr and o_ptr):
        raise ValueError("q, k, v and o must be non-null device pointers")
    strides = bias_strides(bias_shape, (B, H, Sq, Skv)) if bias_ptr else (0, 0, 0, 0)
    if Sq == 0:
        return
    dtype = canonical_dtype(dtype)
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    limits = loader.device_limits()
    v = select_variant(dtype, D, limits, sq=Sq, batch_heads=B * H, tile=tile)
    kernel = loader.get(FAMILY, v["entry"])
    args = launch_args.pack(FAMILY, {
        "q": q_ptr, "k": k_ptr, "v": v_ptr, "o": o_ptr, "bias": bias_ptr,
        "bias_sb": strides[0], "bias_sh": strides[1], "bias_sq": strides[2],
        "bias_sk": strides[3], "kv_start": kv_start_ptr, "kv_end": kv_end_ptr,
        "causal_off": causal_offset_ptr, "H": H, "Hkv": Hkv, "Sq": Sq, "Skv": Skv, "D": D,
        "scale": scale, "causal": 1 if causal else 0, "window": max(int(window), 0),
    })
    grid = (cdiv(Sq, v["BM"]), H, B)
    driver.launch(kernel.function, grid, (32 * v["WARPS"], 1, 1), args, kernel.smem, stream)
