"""Arithmetic on symbolic dimensions.

A dimension is an int, a symbol (``"seq"``), a product such as
``"4*batch*seq"`` (a canonical monomial: integer coefficient, then sorted
factors), or ``None`` (unknown). Products appear when a Reshape merges
dimensions; exact division undoes them, which is what Reshape's ``-1`` needs.
A sum of plain symbols and numbers — a key/value cache concatenated with the new
keys, ``past + seq`` — is one symbol of its own, ``"(past+seq)"`` (terms sorted), so
two tensors built the same way have provably equal lengths.
"""

from __future__ import annotations

from onnxopt.ir.value import Dim

Monomial = tuple[int, tuple[str, ...]]


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
    for part in d.split("*"):
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
    rest = list(terms_a)
    for t in terms_b:
        if t not in rest:
            return None
        rest.remove(t)
    return _sum(rest) if rest else 0


def _terms(d: Dim) -> list | None:
    """The terms of a sum symbol, or ``[d]`` for a plain symbol or number (products: None)."""
    if isinstance(d, int):
        return [d]
    if d is None or "*" in d:
        return None
    if d.startswith("(") and d.endswith(")"):
        return [int(t) if t.lstrip("-").isdigit() else t for t in d[1:-1].split("+")]
    return None if "+" in d else [d]


def _sum(terms: list) -> Dim:
    number = sum(t for t in terms if isinstance(t, int))
    symbols = sorted(t for t in terms if not isinstance(t, int))
    if not symbols:
        return number
    parts = symbols + ([str(number)] if number else [])
    return parts[0] if len(parts) == 1 else "(" + "+".join(parts) + ")"


def evaluate(d: Dim, sizes: dict, default: int = 1) -> int | None:
    """The number ``d`` stands for when its symbols take ``sizes`` (missing ones: ``default``)."""
    if d is None:
        return None
    if isinstance(d, int):
        return d
    terms = _terms(d)
    if terms is not None and len(terms) > 1:
        return sum(evaluate(t, sizes, default) for t in terms)
    coef, factors = to_monomial(d)
    for f in factors:
        coef *= sizes.get(f, default)
    return coef


def same(a: Dim, b: Dim) -> bool:
    """True only when both are known and provably equal."""
    return a is not None and b is not None and to_monomial(a) == to_monomial(b)


def broadcast(a: Dim, b: Dim) -> Dim:
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
    # a symbol against an int > 1: the symbol must equal the int at run time
    return a if isinstance(a, int) else b


def broadcast_shapes(*shapes):
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
