"""Probe lengths a model's own arithmetic accepts.

The mask probe (:mod:`onnxopt.legality.mask`) evaluates a mask at a few small sizes. Some
models derive the mask's length from the input's by arithmetic of their own: a speech
encoder's convolutional front end turns ``samples`` audio samples into
``(samples - 400) // 320 + 1`` frames (wav2vec2, HuBERT), so 4 to 9 samples give no frame at
all and the mask's ``Expand`` fails. Such a failure says nothing about the mask, only that the
size did not fit: the probe then tries longer inputs before it gives up, each the nominal
length plus a growing stride, so the probes of one mask stay distinct sizes.

A longer length is tried only while the mask it would give stays small
(:data:`LONGER_PROBE_ELEMENTS`, its size estimated from the mask's shape before it runs): a mask
that fails for another reason than its length (a broken model, a cache whose lengths disagree)
fails at every length, and over ``seq + 4096`` positions each failure costs a second and
hundreds of megabytes, for every attention of the model. A front end's mask is over frames, a
few hundred of them at the longest length, and stays far under the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

# Added to the nominal length in turn: a front end that eats 400 samples per frame (and one
# 4x larger) still yields a few frames at the last of them.
LONGER_BY = (16, 64, 256, 1024, 4096)
# A longer length whose mask would hold more elements than this is not tried (see above).
LONGER_PROBE_ELEMENTS = 1 << 20


def probe_lengths(seq: int) -> Iterator[int]:
    """``seq`` first, then longer lengths (see the module docstring)."""
    yield seq
    for extra in LONGER_BY:
        yield seq + extra


def first_evaluable(evaluate: Callable[[int], T | str], seq: int,
                    elements: Callable[[int], int] | None = None) -> T | str:
    """``evaluate(length)`` at each of :func:`probe_lengths` until one is not an error (a
    string); else the error at the nominal length (the one a user can relate to). ``elements``:
    the size of the mask at a length, estimated; the longer lengths stop where it passes
    :data:`LONGER_PROBE_ELEMENTS` (the nominal length is always tried)."""
    first_error: str | None = None
    for length in probe_lengths(seq):
        if length != seq and elements is not None and elements(length) > LONGER_PROBE_ELEMENTS:
            break
        result = evaluate(length)
        if not isinstance(result, str):
            return result
        first_error = first_error or result
    return first_error
