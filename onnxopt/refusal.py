"""Why something did not happen, as data: a code to group and test by, the thing at fault, and
the sentence a person reads.

Every stage that declines something says why (DESIGN.md: "every refusal carries a reason").
A sentence alone embeds value names, so reports could not group refusals ("most common
reason" rarely grouped anything) and tests had to pin sentences. A :class:`Refusal` keeps the
three apart: ``code`` is stable and snake_case (``k_not_transposed``, ``needs_cuda``,
``used_outside_match``), ``subject`` names the value or node at fault ('' where none), and
``text`` is what ``explain`` shows. ``str()`` gives the text, so a refusal prints as the
sentence it replaces.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    """One reason, typed (see the module docstring)."""

    code: str
    text: str
    subject: str = ""

    def __post_init__(self) -> None:
        if not self.code or not self.code.replace("_", "").isalnum() or not self.code.islower():
            raise ValueError(f"a refusal code is snake_case, got {self.code!r}")

    def __str__(self) -> str:
        return self.text

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "subject": self.subject, "text": self.text}


def refusal(code: str, text: str, subject: str = "") -> Refusal:
    """A :class:`Refusal` (a short spelling for the many places that return one)."""
    return Refusal(code, text, subject)
