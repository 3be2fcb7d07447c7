"""Probe lengths a model's own arithmetic accepts.

The mask probe (:mod:`onnxopt.legality.mask`) evaluates a mask at a few small sizes. Some
models derive the mask's length from the input's by arithmetic of their own: a speech
encoder's convolutional front end turns ``samples`` audio samples into
``(samples - 400) // 320 + 1`` frames (wav2vec2, HuBERT), so 4 to 9 samples give no frame at
all and the mask's ``Expand`` fails. Such a failure says nothing about the mask, only that the
size did not fit: the probe then tries longer inputs before it gives up, each the nominal
length plus a growing stride, so the probes of one mask stay distinct sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

# Added to the nominal length in turn: a front end that eats 400 samples per frame (and one
# 4x larger) still yields a few frames at the last of them.
LONGER_BY = (16, 64, 256, 1024, 4096)


def probe_lengths(seq: int) -> Iterator[int]:
    """``seq`` first, then longer lengths (see the module docstring)."""
    yield seq
    for extra in LONGER_BY:
        yield seq + extra


def first_evaluable(evaluate: Callable[[int], T | str], seq: int) -> T | str:
    """``evaluate(length)`` at each of :func:`probe_lengths` until one is not an error (a
    string); else the error at the nominal length (the one a user can relate to)."""
    first_error: str | None = None
    for length in probe_lengths(seq):
        result = evaluate(length)
        if not isinstance(result, str):
            return result
        first_error = first_error or result
    return first_error
