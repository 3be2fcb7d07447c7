"""MaskKind: the flags attention's mask was proved to carry, spelled on the node as before."""

from __future__ import annotations

import pytest

from onnxopt.legality.mask import MaskInfo
from onnxopt.ops import MaskKind

SPELLINGS = {"none": MaskKind.NONE, "causal": MaskKind.CAUSAL,
             "key_padding": MaskKind.KEY_PADDING,
             "causal+key_padding": MaskKind.CAUSAL | MaskKind.KEY_PADDING,
             "additive": MaskKind.ADDITIVE}


@pytest.mark.parametrize("text, kind", SPELLINGS.items())
def test_each_spelling_reads_and_writes_back(text, kind):
    assert MaskKind.parse(text) == kind
    assert str(kind) == text and f"mask {kind}" == f"mask {text}"


def test_flags_are_tested_by_membership_not_by_substring():
    both = MaskKind.parse("causal+key_padding")
    assert MaskKind.KEY_PADDING in both and MaskKind.CAUSAL in both
    assert MaskKind.KEY_PADDING not in MaskKind.ADDITIVE


@pytest.mark.parametrize("text", ["weird", "", "causal+", "causal+banana"])
def test_a_spelling_that_names_no_kind_claims_nothing(text):
    assert MaskKind.parse(text) is MaskKind.ADDITIVE


def test_what_the_probes_proved_is_a_kind():
    assert MaskInfo().kind is MaskKind.ADDITIVE
    assert MaskInfo(causal=True).kind is MaskKind.CAUSAL
    assert MaskInfo(causal=True, padding_input=object()).kind == (MaskKind.CAUSAL
                                                                  | MaskKind.KEY_PADDING)
