"""Refusals as data: a stable code, the thing at fault, the sentence."""

import pytest

from onnxopt.refusal import Refusal, refusal


def test_a_refusal_prints_as_its_sentence():
    r = refusal("k_not_transposed", "K is not transposed (Q·K with no Kᵀ)", "%k")
    assert str(r) == "K is not transposed (Q·K with no Kᵀ)"
    assert r.to_json() == {"code": "k_not_transposed", "subject": "%k",
                           "text": "K is not transposed (Q·K with no Kᵀ)"}


@pytest.mark.parametrize("code", ["", "Not Snake", "k-not", "K_NOT"])
def test_codes_are_snake_case(code):
    with pytest.raises(ValueError, match="snake_case"):
        Refusal(code, "text")
