"""The band proof on masked-position arrays: each probe's sides, and what all probes agree on."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.legality.mask import BAND_NOT_CARRIED, NOT_CAUSAL, _band, _band_of_votes


def hidden(sq: int, skv: int, before: int | None, after: int | None) -> np.ndarray:
    """[1, 1, sq, skv]: keys farther than ``before`` / ``after`` from the query's position."""
    p = np.arange(sq)[:, None] + skv - sq
    j = np.arange(skv)[None, :]
    out = np.zeros((sq, skv), bool)
    if before is not None:
        out |= j < p - before
    if after is not None:
        out |= j > p + after
    return out[None, None]


SIZES = ((5, 5), (9, 9), (4, 4), (30, 30))


def votes(before, after, sizes=SIZES):
    return [_band(hidden(sq, skv, before, after)) for sq, skv in sizes]


@pytest.mark.parametrize("before, after, expected", [
    (None, 0, (True, 0)),  # causal
    (3, 0, (True, 3)),  # sliding window
    (20, 0, (True, 20)),  # wider than the small probes: the 30-token one sees it
    (2, 2, (False, 2)),  # local attention
    (None, None, (False, 0)),  # nothing masked
    (100, 0, (True, 0)),  # wider than every probe: a triangle (classify_mask probes past it)
])
def test_bands_are_proved(before, after, expected):
    assert _band_of_votes(votes(before, after)) == expected


def test_a_cache_places_the_band_bottom_right():
    assert _band_of_votes(votes(3, 0, sizes=((4, 9), (2, 12)))) == (True, 3)


@pytest.mark.parametrize("before, after", [(0, 3), (3, 1), (1, 5)])
def test_two_different_widths_are_not_carried(before, after):
    assert _band_of_votes(votes(before, after)) == BAND_NOT_CARRIED


def test_what_is_not_a_band():
    assert _band_of_votes(votes(0, None)) == NOT_CAUSAL  # the triangle on the wrong side
    grows = hidden(9, 9, None, 0)
    grows[0, 0, 8, :2] = True  # the last row sees fewer keys than the one before
    assert _band_of_votes([_band(grows)]) == NOT_CAUSAL
    hole = hidden(9, 9, None, 0)
    hole[0, 0, 6, 3] = True  # not one run of keys
    assert _band(hole) is False
    # a window of 2 at 5 tokens, nothing masked at 9: no one width fits every size
    assert _band_of_votes([_band(hidden(5, 5, 2, 0)), _band(hidden(9, 9, None, None))]) \
        == NOT_CAUSAL
    # the probes disagree on the width
    assert _band_of_votes([_band(hidden(9, 9, 2, 0)), _band(hidden(30, 30, 3, 0))]) == NOT_CAUSAL


def test_planes_that_differ_are_not_a_band():
    two = np.concatenate([hidden(9, 9, 2, 0), hidden(9, 9, 3, 0)], axis=1)
    assert _band(two) is False
