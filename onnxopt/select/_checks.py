"""Capability checks that more than one kernel family makes, each a :class:`Refusal` or None."""

from __future__ import annotations

from onnxopt.ops import AttentionAttrs
from onnxopt.refusal import Refusal, refusal


def no_softcap(attrs: AttentionAttrs) -> Refusal | None:
    """Refuses soft-capped scores (for a kernel that does not cap them)."""
    if not attrs.softcap:
        return None
    return refusal("softcap_not_supported", "does not soft-cap the scores (the node caps them "
                   f"at {attrs.softcap:g})")
