"""Rotary position embedding (RoPE) in float64."""

from __future__ import annotations

import numpy as np


def rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, *, interleaved: bool = False,
           rotary_dim: int = 0) -> np.ndarray:
    """``x·cos + rotate(x)·sin`` over the first ``rotary_dim`` features of the last axis (0: all
    of them; the rest pass through). ``rotate`` is "rotate half", ``concat(-x[d/2:], x[:d/2])``,
    or with ``interleaved`` pairs ``(x[2i], x[2i+1])`` → ``(-x[2i+1], x[2i])`` (GPT-J)."""
    x64 = np.asarray(x, np.float64)
    d = rotary_dim or x64.shape[-1]
    part, rest = x64[..., :d], x64[..., d:]
    if interleaved:
        rot = np.stack([-part[..., 1::2], part[..., 0::2]], axis=-1).reshape(part.shape)
    else:
        rot = np.concatenate([-part[..., d // 2:], part[..., :d // 2]], axis=-1)
    y = part * np.asarray(cos, np.float64) + rot * np.asarray(sin, np.float64)
    return np.concatenate([y, rest], axis=-1)
