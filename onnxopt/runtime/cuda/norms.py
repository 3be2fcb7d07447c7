"""Launch wrappers for ``kernels/layer_norm.cu`` (semantics: ``reference.layer_norm`` /
``reference.rms_norm``) and ``kernels/group_norm.cu`` (``reference.group_norm``)."""

from __future__ import annotations

import functools
from typing import Any

from . import driver, launch_args, loader, metadata
from ._args import aligned, canonical_dtype, cdiv, check_positive

FAMILY = "layer_norm"
GROUP_FAMILY = "group_norm"
STREAM_THREADS = 1024  # a streamed group: the block's loads are all the parallelism it has


def select_variant(dtype: str, hidden: int, *ptrs: int) -> tuple[dict[str, Any], int]:
    """(variant, threads per block): the widest vector width that ``hidden`` and the pointers'
    alignment allow, and a block of about two vectors per thread. Pure; unit-tested."""
    return _select(canonical_dtype(dtype), hidden, aligned(16, *ptrs))


@functools.lru_cache(maxsize=256)
def _select(dtype: str, hidden: int, vec_aligned: bool) -> tuple[dict[str, Any], int]:
    options = sorted(
        (v for v in metadata.variants(FAMILY) if v["dtype"] == dtype), key=lambda v: -v["VEC"]
    )
    for v in options:
        if hidden % v["VEC"] == 0 and (v["VEC"] == 1 or vec_aligned):
            nvec = hidden // v["VEC"]
            threads = min(1024, max(32, cdiv(cdiv(nvec, 2), 32) * 32))
            if cdiv(nvec, threads) <= v["MAXIT"]:
                return v, threads
    formula = metadata.load(FAMILY)["max_hidden"]
    limits = ", ".join(f"{metadata.evaluate(formula, v)} with VEC={v['VEC']}" for v in options)
    raise ValueError(
        f"hidden size {hidden} is above the supported maximum for {dtype} ({limits}; VEC > 1 "
        "needs hidden % VEC == 0 and 16-byte aligned pointers)"
    )


def _launch(
    x_ptr,
    residual_ptr,
    gamma_ptr,
    beta_ptr,
    y_ptr,
    sum_out_ptr,
    rows,
    hidden,
    eps,
    rms,
    dtype,
    stream,
) -> None:
    check_positive(hidden=hidden)
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if not x_ptr or not y_ptr:
        raise ValueError("x and y must be non-null device pointers")
    if sum_out_ptr and not residual_ptr:
        raise ValueError("sum_out needs a residual: without one the sum is x itself")
    if rows == 0:
        return
    if rows >= 2**31:
        raise ValueError(f"rows={rows} exceeds the grid limit")
    v, threads = select_variant(
        dtype, hidden, x_ptr, residual_ptr, gamma_ptr, beta_ptr, y_ptr, sum_out_ptr
    )
    kernel = loader.get(FAMILY, v["entry"])
    args = launch_args.pack(FAMILY, {
        "x": x_ptr, "residual": residual_ptr, "gamma": gamma_ptr, "beta": beta_ptr, "y": y_ptr,
        "sum_out": sum_out_ptr, "N": hidden, "eps": eps, "rms": 1 if rms else 0,
    })
    driver.launch(kernel.function, (rows, 1, 1), (threads, 1, 1), args, kernel.smem, stream)


def layer_norm(
    x_ptr: int,
    gamma_ptr: int,
    beta_ptr: int,
    y_ptr: int,
    rows: int,
    hidden: int,
    eps: float = 1e-5,
    dtype: str = "float16",
    stream: int = 0,
    *,
    residual_ptr: int = 0,
    sum_out_ptr: int = 0,
) -> None:
    """y = LayerNorm(x + residual) * gamma + beta over the last dim of [rows, hidden] tensors.

    gamma/beta [hidden] may be 0 (1 / 0). With ``residual_ptr`` the sum is formed (rounded to
    dtype) and, if ``sum_out_ptr`` is given, written there too. Enqueued on ``stream``.
    """
    _launch(
        x_ptr,
        residual_ptr,
        gamma_ptr,
        beta_ptr,
        y_ptr,
        sum_out_ptr,
        rows,
        hidden,
        eps,
        False,
        dtype,
        stream,
    )


def rms_norm(
    x_ptr: int,
    gamma_ptr: int,
    y_ptr: int,
    rows: int,
    hidden: int,
    eps: float = 1e-6,
    dtype: str = "float16",
    stream: int = 0,
    *,
    residual_ptr: int = 0,
    sum_out_ptr: int = 0,
    beta_ptr: int = 0,
) -> None:
    """y = (x + residual) / sqrt(mean((x + residual)^2) + eps) * gamma (+ beta), per row."""
    _launch(
        x_ptr,
        residual_ptr,
        gamma_ptr,
        beta_ptr,
        y_ptr,
        sum_out_ptr,
        rows,
        hidden,
        eps,
        True,
        dtype,
        stream,
    )


# --- GroupNorm -------------------------------------------------------------------------------------


def group_size_reason(group: int) -> str | None:
    """Why a group of ``group`` elements (channels per group x spatial positions) is beyond
    the kernel, or None."""
    limit = metadata.load(GROUP_FAMILY)["max_group"]
    if group > limit:
        return (f"a group holds {group} elements, above the kernel's limit of {limit} "
                "(int32 indexing inside a group)")
    return None


def select_group_variant(
    dtype: str, group: int, spatial: int, *ptrs: int
) -> tuple[dict[str, Any], int]:
    """(variant, threads per block) for groups of ``group`` elements whose channels hold
    ``spatial`` positions each: the widest vector width that ``spatial`` (a vector never
    crosses a channel) and the pointers' alignment allow; the group held in registers, about
    two vectors per thread, when it fits, else the streaming variant. Pure; unit-tested."""
    return _select_group(canonical_dtype(dtype), int(group), int(spatial), aligned(16, *ptrs))


@functools.lru_cache(maxsize=256)
def _select_group(dtype: str, group: int, spatial: int,
                  vec_aligned: bool) -> tuple[dict[str, Any], int]:
    if (reason := group_size_reason(group)):
        raise ValueError(reason)
    options = [v for v in metadata.variants(GROUP_FAMILY) if v["dtype"] == dtype]
    vec = max(v["VEC"] for v in options
              if v["VEC"] == 1 or (spatial % v["VEC"] == 0 and vec_aligned))
    cached = next(v for v in options if v["VEC"] == vec and v["MAXIT"] > 0)
    nvec = group // vec
    threads = min(1024, max(32, cdiv(cdiv(nvec, 2), 32) * 32))
    if cdiv(nvec, threads) <= cached["MAXIT"]:
        return cached, threads
    return next(v for v in options if v["VEC"] == vec and v["MAXIT"] == 0), STREAM_THREADS


def group_norm(
    x_ptr: int,
    gamma_ptr: int,
    beta_ptr: int,
    y_ptr: int,
    batch: int,
    channels: int,
    spatial: int,
    groups: int,
    eps: float = 1e-5,
    activation: str = "",
    dtype: str = "float16",
    stream: int = 0,
) -> None:
    """y = GroupNorm(x) * gamma + beta, then SiLU when ``activation`` is "silu", over
    [batch, channels, spatial] tensors (spatial: the product of the spatial dims), each of
    ``groups`` groups of channels normalised over its channels and positions. gamma/beta
    [channels] may be 0 (1 / 0). Enqueued on ``stream``."""
    check_positive(channels=channels, groups=groups)
    if channels % groups:
        raise ValueError(f"{channels} channels do not split into {groups} groups")
    codes = metadata.load(GROUP_FAMILY)["activations"]
    if activation not in codes:
        raise ValueError(f"activation must be '' or 'silu', got {activation!r}")
    if batch < 0 or spatial < 0:
        raise ValueError(f"batch and spatial must be >= 0, got {batch} and {spatial}")
    if not x_ptr or not y_ptr:
        raise ValueError("x and y must be non-null device pointers")
    if batch == 0 or spatial == 0:
        return
    blocks = batch * groups
    if blocks > metadata.load(GROUP_FAMILY)["max_blocks"]:
        raise ValueError(f"batch * groups = {blocks} exceeds the grid limit")
    per_group = channels // groups
    # gamma/beta are read one value per channel: their alignment does not matter.
    v, threads = select_group_variant(dtype, per_group * spatial, spatial, x_ptr, y_ptr)
    kernel = loader.get(GROUP_FAMILY, v["entry"])
    args = launch_args.pack(GROUP_FAMILY, {
        "x": x_ptr, "gamma": gamma_ptr, "beta": beta_ptr, "y": y_ptr, "groups": groups,
        "channels_per_group": per_group, "spatial": spatial, "eps": eps,
        "silu": codes[activation],
    })
    driver.launch(kernel.function, (blocks, 1, 1), (threads, 1, 1), args, kernel.smem, stream)
