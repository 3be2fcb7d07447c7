"""The sizes the mask probe gives each symbol."""

from __future__ import annotations

from onnxopt.ir.value import Value
from onnxopt.legality.mask import _symbols


def test_a_one_dimensional_length_does_not_make_its_symbol_the_batch():
    # arange(seq), read for its shape, listed before the [batch, seq, hidden] tensor: its one
    # axis is not a batch axis (the probe at batch 1 would otherwise see a 1x1 mask).
    positions = Value("positions", "int64", ("seq",))
    hidden = Value("hidden", "float32", ("batch", "seq", 64))
    assert _symbols([positions, hidden], batch=1, seq=9) == {"batch": 1, "seq": 9}


def test_the_leading_axis_of_a_tensor_is_the_batch():
    mask = Value("attention_mask", "int64", ("batch", "total"))
    assert _symbols([mask], batch=2, seq=5) == {"batch": 2, "total": 5}


def test_a_length_only_ever_seen_alone_is_a_sequence():
    assert _symbols([Value("positions", "int64", ("seq",))], batch=3, seq=4) == {"seq": 4}
