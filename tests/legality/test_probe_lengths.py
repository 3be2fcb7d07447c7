"""A mask probe that cannot run at a length tries longer ones before it refuses."""

from __future__ import annotations

from onnxopt.legality.probe_lengths import LONGER_BY, first_evaluable, probe_lengths


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
