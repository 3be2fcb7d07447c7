"""LayerNorm and RMSNorm over the last axis (with a residual folded in), and GroupNorm, in
float64."""

from __future__ import annotations

import numpy as np

from onnxopt.reference.activations import sigmoid

GROUP_NORM_ACTIVATIONS = ("", "silu")


def layer_norm(
    x: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    eps: float = 1e-5,
    residual: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """LayerNorm over the last axis of v = x + residual; returns (y, v).

    y = (v - mean) / sqrt(var + eps) * gamma + beta with the biased variance. A kernel rounds
    v to its dtype before normalising (as storing the sum would); pass a rounded residual sum
    here via ``x`` to mimic that exactly, or accept the difference within tolerance.
    """
    v = _add(x, residual)
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (v - mean) / np.sqrt(var + eps)
    return _affine(y, gamma, beta), v


def rms_norm(
    x: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    eps: float = 1e-6,
    residual: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """RMSNorm over the last axis of v = x + residual; returns (y, v).

    y = v / sqrt(mean(v^2) + eps) * gamma + beta (beta usually absent).
    """
    v = _add(x, residual)
    y = v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + eps)
    return _affine(y, gamma, beta), v


def group_norm(
    x: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    groups: int = 1,
    eps: float = 1e-5,
    activation: str = "",
) -> np.ndarray:
    """GroupNorm of x [N, C, *spatial] over ``groups`` groups of C / groups channels, then SiLU.

    Each (n, group) is normalised over its channels and all spatial positions with the biased
    variance; gamma/beta [C] scale and shift per channel (None: 1 / 0); activation "silu"
    applies y * sigmoid(y) after them, "" nothing.
    """
    v = np.asarray(x, dtype=np.float64)
    if v.ndim < 2:
        raise ValueError(f"x must be [N, C, ...], got shape {list(v.shape)}")
    n, c = v.shape[:2]
    if groups <= 0 or c % groups:
        raise ValueError(f"{c} channels do not split into {groups} groups")
    if activation not in GROUP_NORM_ACTIVATIONS:
        raise ValueError(f"activation must be '' or 'silu', got {activation!r}")
    grouped = v.reshape(n, groups, c // groups * int(np.prod(v.shape[2:], dtype=np.int64)))
    mean = grouped.mean(axis=-1, keepdims=True)
    var = ((grouped - mean) ** 2).mean(axis=-1, keepdims=True)
    y = ((grouped - mean) / np.sqrt(var + eps)).reshape(v.shape)
    view = (c,) + (1,) * (v.ndim - 2)
    if gamma is not None:
        y = y * np.asarray(gamma, dtype=np.float64).reshape(view)
    if beta is not None:
        y = y + np.asarray(beta, dtype=np.float64).reshape(view)
    return y * sigmoid(y) if activation == "silu" else y


def _add(x: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x if y is None else x + np.asarray(y, dtype=np.float64)


def _affine(y: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None) -> np.ndarray:
    if gamma is not None:
        y = y * np.asarray(gamma, dtype=np.float64)
    if beta is not None:
        y = y + np.asarray(beta, dtype=np.float64)
    return y
