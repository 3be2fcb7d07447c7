"""Arithmetic on symbolic dimensions.

A dimension is an int, a symbol (``"seq"``), a product such as
``"4*batch*seq"`` (a canonical monomial: integer coefficient, then sorted
factors), or ``None`` (unknown). Products appear when a Reshape merges
dimensions; exact division undoes them, which is what Reshape's ``-1`` needs.
A sum or difference of monomials and numbers — a key/value cache concatenated with
the new keys, ``past + seq``; the new positions sliced off a mask, ``total - past``; the
``2·seq − 1`` relative positions of a window of keys — is one symbol of its own,
``"(past+seq)"``, ``"(total-past)"``, ``"(2*seq-1)"`` (like terms collected, positive ones
first, each group sorted, the number last; terms that cancel dropped), so two tensors built
the same way have provably equal lengths. A sum in a product stays a factor (``"4*(s-1)"``:
exact division by it works), and such a product adds to nothing (it is not a sum's term).
A floor division of a plain symbol by a positive number is a symbol too, ``"samples//10"``
(nested ones merge, ``(x//5)//2 = x//10``): the frame count a strided convolution derives
from the audio length, which an exporter may also compute itself (``samples // 10 - 1``), so
both spellings land on one symbol.
"""

from __future__ import annotations

import re

from onnxopt.ir.value import Dim

Monomial = tuple[int, tuple[str, ...]]


FRESH_PREFIX = "?"


def is_fresh(d: Dim) -> bool:
    """A symbol inference made up for a dim it cannot name (``?7``): it stands for that one
    value's dim, so values derived from it provably share it; it is never written to a file."""
    return isinstance(d, str) and d.startswith(FRESH_PREFIX)


def is_unknown_symbol(d: Dim) -> bool:
    return isinstance(d, str) and d.startswith("unk__")


def clean(d: Dim) -> Dim:
    """Drop ONNX shape inference's anonymous ``unk__N`` symbols (they carry no identity we trust)."""
    return None if is_unknown_symbol(d) else d


def to_monomial(d: Dim) -> Monomial | None:
    if d is None:
        return None
    if isinstance(d, int):
        return (d, ())
    coef, factors = 1, []
    for part in _factors(d):
        part = part.strip()
        if part.lstrip("-").isdigit():
            coef *= int(part)
        elif part:
            factors.append(part)
    return (coef, tuple(sorted(factors)))


def from_monomial(m: Monomial) -> Dim:
    coef, factors = m
    if not factors:
        return coef
    if coef == 0:
        return 0
    parts = ([str(coef)] if coef != 1 else []) + list(factors)
    return "*".join(parts)


def _factors(d: str) -> list[str]:
    """``d`` split at the ``*`` outside parentheses (a sum factor keeps its own signs)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(d):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "*" and depth == 0:
            parts.append(d[start:i])
            start = i + 1
    parts.append(d[start:])
    return parts


def _is_sum(d: Dim) -> bool:
    """``"(a+b)"``: one parenthesised sum, nothing outside it and no parentheses within."""
    return (isinstance(d, str) and d.startswith("(") and d.endswith(")")
            and "(" not in d[1:] and ")" not in d[:-1])


def mul(a: Dim, b: Dim) -> Dim:
    ma, mb = to_monomial(a), to_monomial(b)
    if ma is None or mb is None:
        return None
    return from_monomial((ma[0] * mb[0], tuple(sorted(ma[1] + mb[1]))))


def product(dims) -> Dim:
    out: Dim = 1
    for d in dims:
        out = mul(out, d)
        if out is None:
            return None
    return out


def div(a: Dim, b: Dim) -> Dim:
    """Exact division, or None when it is not exact or not known."""
    ma, mb = to_monomial(a), to_monomial(b)
    if ma is None or mb is None or mb[0] == 0:
        return None
    factors = list(ma[1])
    for f in mb[1]:
        if f not in factors:
            return None
        factors.remove(f)
    if ma[0] % mb[0]:
        return None
    return from_monomial((ma[0] // mb[0], tuple(factors)))


FLOOR = "//"


def floordiv(a: Dim, s: int) -> Dim:
    """``floor(a / s)`` for a dim ``a`` (never negative) and a number ``s >= 1``, where it can be
    written: a number; an exact division; a plain symbol (``"x//s"``); a sum of one symbol and a
    multiple of ``s``, ``floor((x + k·s) / s) = floor(x / s) + k``. Else None (unknown)."""
    if a is None or not isinstance(s, int) or s < 1:
        return None
    if isinstance(a, int):
        return a // s
    if s == 1:
        return a
    exact = div(a, s)
    if exact is not None:
        return exact
    terms = _terms(a)
    if terms is None:
        return None
    symbols = [(sign, t) for sign, t in terms if not isinstance(t, int)]
    number = sum(sign * t for sign, t in terms if isinstance(t, int))
    if len(symbols) != 1 or symbols[0][0] != 1 or "*" in symbols[0][1] or number % s:
        return None
    return add(_floor_symbol(symbols[0][1], s), number // s)


def _floor_symbol(x: str, s: int) -> str:
    if FLOOR in x:
        inner, k = x.rsplit(FLOOR, 1)
        return f"{inner}{FLOOR}{int(k) * s}"
    return f"{x}{FLOOR}{s}"


def is_floor_symbol(d: Dim) -> bool:
    """A ``"x//s"`` symbol: a value computed from ``x``, not a size of its own."""
    return isinstance(d, str) and FLOOR in d and not any(c in d for c in "()*+")


def add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if b == 0:
        return a
    if a == 0:
        return b
    terms_a, terms_b = _terms(a), _terms(b)
    if terms_a is None or terms_b is None:
        return None
    return _sum(terms_a + terms_b)


def sub(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if b == 0:
        return a
    terms_a, terms_b = _terms(a), _terms(b)
    if terms_a is None or terms_b is None:
        return None
    return _sum(terms_a + [(-sign, t) for sign, t in terms_b])


def _terms(d: Dim) -> list | None:
    """Terms ``(coefficient, t)`` of a sum symbol such as ``"(2*seq-1)"``, or of a monomial or
    number: ``t`` is a number (coefficient ±1) or a monomial's factors (``"seq"``,
    ``"seq*seq"``); None for a product with a sum among its factors (not represented)."""
    if isinstance(d, int):
        return [(1, d)]
    if d is None:
        return None
    if _is_sum(d):
        out = []
        for token in re.findall(r"[+-]?[^+-]+", d[1:-1]):
            sign = -1 if token.startswith("-") else 1
            body = token.lstrip("+-")
            if body.isdigit():
                out.append((sign, int(body)))
            else:
                coef, factors = to_monomial(body)
                out.append((sign * coef, "*".join(factors)))
        return out
    coef, factors = to_monomial(d)
    if any("(" in f for f in factors):
        return None
    return [(coef, "*".join(factors))] if factors else [(1, coef)]


def _sum(terms: list) -> Dim:
    number = sum(c * t for c, t in terms if isinstance(t, int))
    counts: dict[str, int] = {}
    for c, t in terms:
        if not isinstance(t, int):
            counts[t] = counts.get(t, 0) + c
    plus = sorted((t, c) for t, c in counts.items() if c > 0)
    minus = sorted((t, -c) for t, c in counts.items() if c < 0)
    if not plus and not minus:
        return number
    if len(plus) == 1 and not minus and not number:
        return from_monomial((plus[0][1], tuple(plus[0][0].split("*"))))
    text = "+".join(_term_text(t, c) for t, c in plus)
    text += "".join(f"-{_term_text(t, c)}" for t, c in minus)
    if number:
        text += f"{number:+d}"
    return "(" + text + ")"


def _term_text(t: str, coef: int) -> str:
    return t if coef == 1 else f"{coef}*{t}"


def evaluate(d: Dim, sizes: dict, default: int = 1) -> int | None:
    """The number ``d`` stands for when its symbols take ``sizes`` (missing ones: ``default``)."""
    if d is None:
        return None
    if isinstance(d, int):
        return d
    terms = _terms(d)
    if terms is not None and (len(terms) > 1 or terms[0][0] < 0):
        return sum(c * evaluate(t, sizes, default) for c, t in terms)
    coef, factors = to_monomial(d)
    for f in factors:
        if _is_sum(f):
            coef *= evaluate(f, sizes, default)
        elif FLOOR in f:
            inner, k = f.rsplit(FLOOR, 1)
            coef *= evaluate(inner, sizes, default) // int(k)
        else:
            coef *= sizes.get(f, default)
    return coef


def same(a: Dim, b: Dim) -> bool:
    """True only when both are known and provably equal."""
    return a is not None and b is not None and to_monomial(a) == to_monomial(b)


def broadcast(a: Dim, b: Dim) -> Dim:
    """The dim two broadcast dims give, where it is provable; else None (unknown). The one
    broadcast rule of the project: shape inference and the passes that shape new nodes read
    it, so a node a pass makes has the shape inference would give it."""
    if a == 1:
        return b
    if b == 1:
        return a
    if same(a, b):
        return a
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return None  # incompatible: leave unknown, the model is wrong or we are
    if not isinstance(a, int) and not isinstance(b, int):
        return None  # two different symbols: either may be the 1 that broadcasts
    # a symbol against an int > 1: the symbol must equal the int at run time
    return a if isinstance(a, int) else b


def broadcast_shapes(*shapes):
    """NumPy-style broadcast of symbolic shapes by :func:`broadcast`; None if one is unknown."""
    if any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        d: Dim = 1
        for s in shapes:
            k = i - (rank - len(s))
            if k >= 0:
                d = broadcast(d, s[k])
        out.append(d)
    return tuple(out)
