"""Stage 5: fusion rules, one per file. ``all_rules()`` lists them in priority order."""

from __future__ import annotations

from onnxopt.rules.base import Rule


def all_rules() -> list[Rule]:
    from onnxopt.rules.attention import Attention

    return [Attention()]
