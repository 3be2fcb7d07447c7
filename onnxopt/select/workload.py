"""The shapes a model will run at: the regimes kernel selection ranks and tunes kernels in.

A decoder with a key/value cache runs two very different workloads: a *prefill* (the
prompt: many queries, few or no cached keys) and many *decode* steps (one query against a
long cache). Costs measured at one representative size (batch 1, sequence 128) rank the
kernels for the prefill only: a form that skips the masked half of causal attention pays
there and costs copies of the whole cache in a decode step, where nothing is masked.

So selection ranks each fused node in every :class:`Regime` of the workload. By default a
model gets one prefill regime (batch 1, 128 queries, nothing cached), and where it has a
key/value cache input (:func:`cache_symbols`) also a decode regime (batch 1, one query,
the cache's own length when it is fixed, else ``DEFAULT_PAST``). ``--workload`` states
them instead (:func:`parse_regime`), and ``--shape`` adds the sizes it pins as a regime of
its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from onnxopt.errors import UsageError
from onnxopt.ir import symdim as sd
from onnxopt.ir.model import Model
from onnxopt.ir.value import Value
from onnxopt.select.shapes import DEFAULT_BATCH, DEFAULT_SEQ, Binding

DEFAULT_PAST = 1024
PREFILL, DECODE, STATED = "prefill", "decode", "shape"
_KINDS = (PREFILL, DECODE)
_KEYS = ("batch", "seq", "past")


@dataclass(frozen=True)
class Regime:
    """One shape the model runs at: ``batch`` sequences of ``seq`` new tokens (queries) each,
    after ``past`` cached ones. ``sizes`` pins named symbolic dims (``--shape seq=64``)."""

    kind: str
    batch: int = DEFAULT_BATCH
    seq: int = DEFAULT_SEQ
    past: int = 0
    sizes: tuple[tuple[str, int], ...] = field(default=())

    def __str__(self) -> str:
        if self.kind == STATED:  # the pinned sizes say it all (the rest are defaults)
            return f"{self.kind}: " + ", ".join(f"{k}={v}" for k, v in self.sizes)
        text = f"{self.kind}: batch {self.batch}, {self.seq} token{'s' * (self.seq != 1)}"
        if self.past:
            text += f", past {self.past}"
        if self.sizes:
            text += ", " + ", ".join(f"{k}={v}" for k, v in self.sizes)
        return text

    @property
    def label(self) -> str:
        """A short form for reports and tuning signatures: ``decode b1 s1 p1024``."""
        if self.kind == STATED:
            return f"{self.kind} " + " ".join(f"{k}={v}" for k, v in self.sizes)
        return f"{self.kind} b{self.batch} s{self.seq} p{self.past}"

    def to_json(self) -> dict:
        data = {"kind": self.kind, "batch": self.batch, "seq": self.seq, "past": self.past}
        if self.sizes:
            data["sizes"] = dict(self.sizes)
        return data


def parse_regime(text: str) -> Regime:
    """``decode:batch=4,past=1024`` / ``prefill:seq=512`` / ``decode`` → a :class:`Regime`.

    A decode regime has one query unless ``seq`` says otherwise, and ``DEFAULT_PAST`` cached
    keys unless ``past`` does; a prefill has ``DEFAULT_SEQ`` queries and no past."""
    kind, _, rest = text.strip().partition(":")
    example = "e.g. decode:batch=4,past=1024 or prefill:batch=1,seq=512"
    if kind not in _KINDS:
        raise UsageError(f"--workload {text}: the regime must be one of {', '.join(_KINDS)} "
                         f"({example})")
    values = {"batch": DEFAULT_BATCH, "seq": 1 if kind == DECODE else DEFAULT_SEQ,
              "past": DEFAULT_PAST if kind == DECODE else 0}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in _KEYS or not value.strip().isdigit():
            raise UsageError(f"--workload {text}: '{item}' is not KEY=NUMBER with KEY one of "
                             f"{', '.join(_KEYS)} ({example})")
        values[key] = int(value)
    if values["batch"] < 1 or values["seq"] < 1:
        raise UsageError(f"--workload {text}: batch and seq must be at least 1")
    return Regime(kind, values["batch"], values["seq"], values["past"])


def cache_symbols(model: Model) -> dict[str, int | None]:
    """The key/value cache inputs' length dims: symbol (or ``""`` for a fixed one) → fixed
    length or None.

    A cache input is a floating-point graph input of rank 3 or more that a ``Concat`` joins,
    on the axis before the last, to values the model computes (the new keys): the layout of
    every ``past_key_values`` export, named however the exporter names it."""
    found: dict[str, int | None] = {}
    for value in model.graph.inputs:
        if not _is_cache(value):
            continue
        dim = value.shape[-2]
        if isinstance(dim, int):
            found.setdefault("", dim)
        elif isinstance(dim, str):
            found.setdefault(dim, None)
    return found


def _is_cache(value: Value) -> bool:
    shape = value.shape
    if (shape is None or len(shape) < 3 or value.dtype not in ("float32", "float16", "bfloat16",
                                                                 "float64")):
        return False
    for user, index in _read_through(value):
        if user.op_type != "Concat" or len(user.inputs) != 2:
            continue
        axis = user.attr("axis", 0)
        if axis in (len(shape) - 2, -2) and user.inputs[1 - index] is not None \
                and user.inputs[1 - index].const is None:
            return True
    return False


def _read_through(value: Value, depth: int = 3):
    """``value``'s uses, and those of what a Cast or Identity makes of it."""
    for user, index in value.uses():
        if user.op_type in ("Cast", "Identity") and depth:
            yield from _read_through(user.output, depth - 1)
        else:
            yield user, index


def default_workload(model: Model) -> tuple[Regime, ...]:
    """A prefill, and for a model with a key/value cache a decode step (its past the cache's
    fixed length, else ``DEFAULT_PAST``)."""
    prefill = Regime(PREFILL)
    cache = cache_symbols(model)
    if not cache:
        return (prefill,)
    fixed = [n for n in cache.values() if n is not None]
    return (prefill, Regime(DECODE, seq=1, past=fixed[0] if fixed else DEFAULT_PAST))


def workload(model: Model, stated: Iterable[Regime] = (),
             pinned: Mapping[str, tuple[int, ...]] | None = None,
             queries: Iterable[str] = ()) -> tuple[Regime, ...]:
    """The regimes to rank in: those ``stated`` (``--workload``), else the default ones; and
    the sizes ``pinned`` by ``--shape`` (input shapes or named dims) as one regime more (its
    batch, new tokens and past read from the pinned batch, ``queries`` and cache dims)."""
    regimes = tuple(stated) or default_workload(model)
    if pinned:
        regimes += (_pinned_regime(model, pinned, set(queries)),)
    return regimes


def _pinned_regime(model: Model, pinned: Mapping[str, tuple[int, ...]],
                   queries: set[str]) -> Regime:
    sizes: dict[str, int] = {}
    batches: set[str] = set()
    inputs = {v.name: v for v in model.graph.inputs}
    for value in model.graph.inputs:
        if value.shape and isinstance(value.shape[0], str):
            batches.add(value.shape[0])
    for name, dims in pinned.items():
        value = inputs.get(name)
        if value is None:
            if len(dims) == 1:
                sizes[name] = dims[0]
            continue
        for d, n in zip(value.shape or (), dims):
            if isinstance(d, str):
                sizes.setdefault(d, n)
    cache = cache_symbols(model)
    role = {"batch": DEFAULT_BATCH, "seq": DEFAULT_SEQ, "past": 0}
    for name, size in sizes.items():
        key = ("batch" if name in batches else "seq" if name in queries
               else "past" if name in cache else None)
        if key:
            role[key] = size
    return Regime(STATED, role["batch"], role["seq"], role["past"],
                  sizes=tuple(sorted(sizes.items())))


def binding(model: Model, regime: Regime, query_symbols: Iterable[str] = ()) -> Binding:
    """Sizes for the model's symbolic dims in ``regime``: an input's first dim is the batch,
    a cache's length the past, a query length (``query_symbols``, the attention nodes' query
    dims) the new tokens, and in a model with a cache every other dim past + new tokens (the
    attention mask's keys); without a cache every other dim is the sequence."""
    cache = {s for s in cache_symbols(model) if s}
    queries = set(query_symbols)
    pinned = dict(regime.sizes)
    batch, seq, past = regime.batch, regime.seq, regime.past
    for name, size in pinned.items():  # a pinned cache or query length sizes the keys too
        past = size if name in cache else past
        seq = size if name in queries else seq
    sizes: dict[str, int] = {}
    for value in model.graph.inputs:
        for i, d in enumerate(value.shape or ()):
            if not isinstance(d, str) or "*" in d or "+" in d or d in sizes:
                continue
            if i == 0:
                sizes[d] = batch
            elif d in cache:
                sizes[d] = past
            elif d in queries or not cache:
                sizes[d] = seq
            else:
                sizes[d] = past + seq
    sizes.update(pinned)
    return Binding(sizes, seq)


def query_symbols(nodes: Iterable) -> set[str]:
    """The symbolic query lengths of attention nodes (their Q's axis -2)."""
    out: set[str] = set()
    for node in nodes:
        if node.op_type == "AttentionFused" and node.inputs and node.inputs[0].shape:
            d = node.inputs[0].shape[-2]
            if isinstance(d, str) and sd.to_monomial(d) is not None:
                factors = sd.to_monomial(d)[1]
                if len(factors) == 1:
                    out.add(factors[0])
    return out
