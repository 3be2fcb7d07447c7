"""A mask probe that cannot run at a length tries longer ones before it refuses."""

from __future__ import annotations

from onnxopt.legality.probe_lengths import (
    LONGER_BY,
    LONGER_PROBE_ELEMENTS,
    first_evaluable,
    probe_lengths,
)


def test_the_nominal_length_comes_first_then_longer_distinct_ones():
    lengths = list(probe_lengths(5))
    assert lengths[0] == 5 and lengths == sorted(set(lengths))
    assert len(lengths) == 1 + len(LONGER_BY)


def test_a_front_end_that_needs_400_samples_per_frame_is_probed_where_it_has_frames():
    tried = []

    def evaluate(samples):  # wav2vec2's front end: no frame under 400 samples
        tried.append(samples)
        frames = (samples - 400) // 320 + 1
        return "invalid expand shape" if frames < 1 else ("mask", frames)

    assert first_evaluable(evaluate, 9) == ("mask", 2)
    assert tried == [9, 25, 73, 265, 1033]


def test_when_no_length_fits_the_error_at_the_nominal_length_is_kept():
    assert first_evaluable(lambda n: f"failed at {n}", 4) == "failed at 4"


def test_longer_lengths_stop_where_the_mask_would_be_large():
    """A mask that fails at every length (a broken model, a cache whose lengths disagree) is
    not evaluated over thousands of positions: each such failure cost a second (fuzz run 61,
    a merged decoder's mutant: 11 s in the fusion stage, a hang)."""
    tried = []

    def evaluate(length):
        tried.append(length)
        return "invalid expand shape"

    square = lambda length: 2 * length * length  # a [batch, 1, S, S] mask
    assert first_evaluable(evaluate, 5, square) == "invalid expand shape"
    assert tried == [5, 21, 69, 261]
    assert all(square(n) <= LONGER_PROBE_ELEMENTS for n in tried[1:])


def test_the_nominal_length_is_tried_whatever_its_size():
    tried = []
    first_evaluable(lambda n: tried.append(n) or "no", 4098, lambda n: n * n)
    assert tried == [4098]
