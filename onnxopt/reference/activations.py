"""GELU (erf or tanh, with a bias), SiLU and SwiGLU in float64."""

from __future__ import annotations

import math

import numpy as np

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715


def sigmoid(g: np.ndarray) -> np.ndarray:
    """The logistic function, split by sign so that ``exp`` never overflows."""
    e = np.exp(-np.abs(g))
    return np.where(g >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def gelu(x: np.ndarray, bias: np.ndarray | None = None, *, approximate: str = "none"
         ) -> np.ndarray:
    """GELU(x + bias); approximate="none" uses erf, "tanh" the tanh approximation."""
    t = np.asarray(x, dtype=np.float64)
    if bias is not None:
        t = t + np.asarray(bias, dtype=np.float64)
    if approximate == "tanh":
        return 0.5 * t * (1.0 + np.tanh(SQRT_2_OVER_PI * (t + TANH_CUBIC * t**3)))
    if approximate != "none":
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * t * (1.0 + erf(t / math.sqrt(2.0)))


bias_gelu = gelu  # the name of the CUDA kernel family that computes it


def silu(x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """x · sigmoid(alpha · x) (SiLU/Swish; alpha 1.702 is the "quick GELU")."""
    t = np.asarray(x, dtype=np.float64)
    return t * sigmoid(alpha * t)


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """silu(gate) · up."""
    return silu(gate) * np.asarray(up, dtype=np.float64)


def swiglu_fused(x: np.ndarray) -> np.ndarray:
    """SwiGLU of one tensor [..., 2N] split in halves along the last axis: gate first, up second."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    if n % 2:
        raise ValueError(f"last dimension {n} is odd; cannot split into gate and up halves")
    return swiglu(x[..., : n // 2], x[..., n // 2 :])
