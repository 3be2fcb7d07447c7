"""What attention's mask was proved to contain (``AttentionFused``'s ``mask_kind``).

The attention rule proves a mask's structure by evaluating it (``onnxopt.legality.mask``): a
causal diagonal, key padding from a ``[B, Skv]`` input, both, or nothing provable
(``ADDITIVE``: the mask is only known as the exact additive function it always is). A kernel
that builds the mask itself reads these flags. On the node the kind is spelled as it always
was: ``none``, ``causal``, ``key_padding``, ``causal+key_padding``, ``additive``.

``WINDOW``: the mask is a band, keys at most ``window`` (the fused op's attribute) positions
from the query's; with ``CAUSAL`` only those before it (sliding-window attention), without it
both sides (local attention). Spelled ``causal+window``, ``causal+key_padding+window``, ``key_padding+window``.
"""

from __future__ import annotations

import enum


class MaskKind(enum.Flag):
    NONE = 0  # no mask
    CAUSAL = enum.auto()
    KEY_PADDING = enum.auto()
    ADDITIVE = enum.auto()  # a mask with no proved structure
    WINDOW = enum.auto()  # a band: the ``window`` attribute says how wide

    @classmethod
    def parse(cls, text: str) -> MaskKind:
        """The kind a node's ``mask_kind`` spells. A spelling that names no kind claims nothing
        about the mask: ``ADDITIVE``, the one meaning every mask input has (it is exact)."""
        if text == "none":
            return cls.NONE
        kind = cls.NONE
        for part in text.split("+"):
            member = cls.__members__.get(part.upper())
            if member is None or not part:
                return cls.ADDITIVE
            kind |= member
        return kind

    def __str__(self) -> str:
        return "+".join(m.name.lower() for m in self) or "none"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)
