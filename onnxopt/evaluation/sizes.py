"""Probe inputs: sizes that a model with tied lengths accepts, and padded masks.

A model whose symbolic lengths are tied — a key/value cache, where the mask covers
``past + seq`` keys — runs only on consistent sizes, which one shared size never
gives. Mask probes and verification both search for such sizes here, and both feed
attention masks with padding, so that masking is really exercised.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np


def size_alternatives(symbols: list[str], seq: int, limit: int = 27) -> Iterator[dict[str, int]]:
    """Sizes for ``symbols``: ``seq`` for all first, then mixes of ``seq``, a shorter length
    and their sum, fewest changes first. A model whose lengths are tied — a key/value cache,
    where the mask covers ``past + seq`` — runs only on consistent sizes, which one shared
    size never gives."""
    past = seq // 2 + 1
    choices = (seq, past, seq + past)
    combos = sorted(itertools.product(range(3), repeat=len(symbols)),
                    key=lambda c: (sum(x != 0 for x in c), c))
    for combo in combos[:limit]:
        yield {s: choices[i] for s, i in zip(symbols, combo)}


def first_consistent(symbols: list[str], seq: int, attempt):
    """``attempt(overrides)`` with no override, then with each of :func:`size_alternatives`,
    until one does not raise: ``(result, None)``, or ``(None, the first exception)``."""
    first_error = None
    for overrides in [{}, *size_alternatives(symbols, seq)]:
        try:
            return attempt(overrides), None
        except Exception as e:  # noqa: BLE001 - inconsistent sizes: try the next assignment
            first_error = first_error or e
    return None, first_error


def padding_mask(shape: tuple[int, ...]) -> np.ndarray:
    """Ones with trailing zeros: row 0 loses its last 2 positions, later rows a third of theirs."""
    mask = np.ones(shape, dtype=np.int64)
    if len(shape) < 2 or shape[-1] < 3:
        return mask
    seq = shape[-1]
    flat = mask.reshape(-1, seq)
    for row in range(flat.shape[0]):
        pad = 2 if row == 0 else max(1, seq // 3) + row - 1
        flat[row, seq - min(pad, seq - 1):] = 0
    return mask


def padding_mask_both_sides(shape: tuple[int, ...]) -> np.ndarray:
    """:func:`padding_mask` with every other row padded at its start instead (left padding, as
    batched generation feeds): such a row's first queries see no key at all under a causal
    mask, a case right padding never makes and kernels treat differently (zeros, NaN, the
    uniform average)."""
    mask = padding_mask(shape)
    if len(shape) < 2 or shape[-1] < 3:
        return mask
    flat = mask.reshape(-1, shape[-1])
    flat[1::2] = flat[1::2, ::-1].copy()
    return mask
