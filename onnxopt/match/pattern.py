"""A small declarative pattern language over the IR.

A pattern is a tree of :class:`Pat` objects describing how a value is
computed, read from the root (the last node) back to its inputs::

    x = p.var("x")
    p.Mul(x, p.Sigmoid(x))            # SiLU: the same x on both sides

- ``p.var(name)`` binds any value (and must bind the same one everywhere it
  appears); ``dtype=``/``rank=``/``dims=`` constrain it, and ``dims`` names
  shape variables (``("B", "H", "S", "D")``) unified across the whole match.
- ``p.const(name)`` matches a constant; ``value=`` pins its value (within a
  tolerance), ``scalar=True`` asks for a single element.
- ``p.<Op>(*inputs, name=..., attrs=..., sem=...)`` matches a node by op
  type; binary ops that commute are tried in both operand orders.
- ``p.any(a, b, ...)`` tries alternatives in order; ``p.optional(op_pat,
  through)`` is "either this op, or nothing and continue at ``through``".
- ``private=True`` on an op asks that its result be read by the node that reads it in the
  pattern alone (once), and not be a graph output: a value the rewrite may drop.

By default a match is greedy, as the fusion rules take it: each part of the pattern keeps
the first way it fits, and only the node whose inputs are being tried retries its other
operand order. ``match_pattern(..., exhaustive=True)`` searches instead (backtracking):
every way the pattern fits, in the same order — a commuting node's own operand order before
the reverse, alternatives in order, inputs left to right — so a later part that fails
makes an earlier part try its next way; ``accept`` then takes the first match it approves.
Where the greedy match succeeds the search finds the same match first.

Matching returns a :class:`Match` whose bindings are attributes (``m.x``,
``m.scale``), or records in the :class:`Trace` how far it got and why it
stopped — a :class:`~onnxopt.refusal.Refusal`, whose code names the kind of
mismatch (``wrong_op``, ``constant_value``, …) — so the best partial match of
each rule can be explained and reports can group partial matches by why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxopt.ir.node import Node
from onnxopt.ir.schema_facts import attribute_defaults
from onnxopt.ir.semantics import COMMUTATIVE, STANDARD_DOMAINS
from onnxopt.ir.value import Value
from onnxopt.refusal import Refusal

_DTYPE_TOLERANCE = {"float16": 1e-3, "bfloat16": 8e-3}



class Pat:
    """Base class of pattern nodes."""

    def match(self, value: Value | None, state: _State) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def search(self, value: Value | None, state: _State) -> Iterator[None]:
        """Every way ``value`` fits, in order: yields with ``state`` holding each one's
        bindings, and leaves ``state`` as it found it once exhausted. A pattern with one way
        at most (a variable, a constant) fits as :meth:`match` says."""
        snapshot = state.save()
        if self.match(value, state):
            yield
        state.restore(snapshot)


@dataclass(eq=False)
class Var(Pat):
    name: str
    dtype: frozenset[str] | None = None
    rank: int | tuple[int, ...] | None = None
    dims: tuple[Any, ...] | None = None

    def match(self, value, state):
        if value is None:
            return state.fail("input_missing", f"{self.name}: an input is missing")
        bound = state.bindings.get(self.name)
        if bound is not None:
            return bound is value or state.fail(
                "not_the_same_value",
                f"%{value.name} should be the same value as %{bound.name} ({self.name})",
                f"%{value.name}")
        if self.dtype is not None and value.dtype not in self.dtype:
            return state.fail("wrong_dtype", f"%{value.name} ({self.name}) has dtype "
                              f"{value.dtype}, expected one of {sorted(self.dtype)}",
                              f"%{value.name}")
        if self.rank is not None:
            ranks = (self.rank,) if isinstance(self.rank, int) else self.rank
            if value.rank not in ranks:
                return state.fail("wrong_rank", f"%{value.name} ({self.name}) has rank "
                                  f"{value.rank}, expected {' or '.join(map(str, ranks))}",
                                  f"%{value.name}")
        if self.dims is not None and not state.unify_dims(value, self.dims, self.name):
            return False
        state.bindings[self.name] = value
        return True


@dataclass(eq=False)
class Const(Pat):
    name: str | None = None
    value: float | None = None
    scalar: bool = False
    tolerance: float = 1e-6

    def match(self, value, state):
        if value is None or value.const is None:
            what = "missing" if value is None else f"%{value.name} is computed, not a constant"
            return state.fail("not_a_constant", f"expected a constant{self._label()}: {what}",
                              "" if value is None else f"%{value.name}")
        if self.scalar and value.const.size != 1:
            return state.fail("not_a_scalar", f"constant %{value.name}{self._label()} has "
                              f"shape {list(value.const.shape)}, expected a single value",
                              f"%{value.name}")
        if self.value is not None:
            arr = value.const.numpy()
            if value.const.dtype not in ("float32", "float64", "float16", "bfloat16", "int64",
                                         "int32") or arr.size == 0:
                return state.fail("constant_not_numeric",
                                  f"constant %{value.name} is not numeric", f"%{value.name}")
            # A constant stored in half precision is the intended value rounded to it.
            tolerance = max(self.tolerance, _DTYPE_TOLERANCE.get(value.const.dtype, 0.0))
            ok = np.all(np.abs(arr.astype(np.float64) - self.value)
                        <= tolerance * max(1.0, abs(self.value)))
            if not ok:
                shown = arr.reshape(-1)[0] if arr.size else "?"
                return state.fail("constant_value", f"constant %{value.name} is {shown:.6g}, "
                                  f"expected {self.value:.6g}{self._label()}", f"%{value.name}")
        if self.name:
            bound = state.bindings.get(self.name)
            if bound is not None and bound is not value:
                return state.fail("not_the_same_value",
                                  f"constant %{value.name} should be %{bound.name}",
                                  f"%{value.name}")
            state.bindings[self.name] = value
        return True

    def _label(self) -> str:
        return f" ({self.name})" if self.name else ""


@dataclass(eq=False)
class Op(Pat):
    """A node of ``op_type`` whose inputs match ``inputs``.

    The contract is strict by default: the node has no more inputs than the pattern lists
    (``other_inputs=True`` allows more), and every attribute the node sets to something
    other than its ONNX default is either pinned in ``attrs`` or named in ``reads`` (the
    rule reads it itself); ``other_attrs=True`` allows any. A node with fewer inputs than
    listed matches only where the missing ones are :meth:`Builder.maybe`.
    """

    op_type: str
    inputs: tuple[Pat, ...]
    name: str | None = None
    domain: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    sem: dict[str, Any] = field(default_factory=dict)
    check: Callable[[Node], Refusal | None] | None = None  # why the node does not fit
    commutative: bool | None = None
    other_inputs: bool = False
    reads: tuple[str, ...] = ()
    other_attrs: bool = False
    private: bool = False  # the result is read by the pattern's reader alone, once

    def match(self, value, state):
        node = self._admit(value, state)
        if not isinstance(node, Node):
            return node
        state.progress += 1
        orders = self._orders(node)
        for k, inputs in enumerate(orders):
            snapshot = state.save()
            if all(p.match(v, state) for p, v in zip(self.inputs, inputs)):
                self._bind(value, node, state)
                return True
            if k + 1 < len(orders):
                state.restore(snapshot)
        return False

    def search(self, value, state):
        snapshot = state.save()
        node = self._admit(value, state)
        if node is True:  # this pattern node already matched this very value
            yield
        elif isinstance(node, Node):
            state.progress += 1
            for inputs in self._orders(node):
                for _ in _search_all(self.inputs, inputs, 0, state):
                    before = state.save()
                    self._bind(value, node, state)
                    yield
                    state.restore(before)
        state.restore(snapshot)

    def _bind(self, value: Value, node: Node, state: _State) -> None:
        state.by_pattern[id(self)] = value
        state.nodes.append(node)
        if self.name:
            state.bindings[self.name] = node

    def _orders(self, node: Node) -> list[tuple[Value | None, ...]]:
        """The node's inputs in the orders to try, each cut or padded to the pattern's."""
        commutes = self.commutative if self.commutative is not None else (
            self.op_type in COMMUTATIVE and len(self.inputs) == 2)
        orders = [tuple(node.inputs)]
        if commutes and len(node.inputs) == 2:
            orders.append(tuple(reversed(node.inputs)))
        n = len(self.inputs)
        # (inputs beyond the pattern's: allowed by the contract; fewer: matched as missing)
        return [inputs[:n] + (None,) * (n - len(inputs[:n])) for inputs in orders]

    def _admit(self, value, state) -> Node | bool:
        """The node producing ``value`` when it fits this pattern node itself (op, domain,
        attributes, meaning, contract, privacy, check), its inputs still to match; ``True``
        when this pattern node already matched ``value``; else ``False``, the reason
        recorded."""
        if value is None:
            return state.fail("input_missing", f"expected {self.op_type}, found a missing input")
        seen = state.by_pattern.get(id(self))
        if seen is not None:
            return seen is value or state.fail(
                "not_the_same_value",
                f"%{value.name} should be the same value as %{seen.name} ({self.op_type})",
                f"%{value.name}")
        node = value.producer
        if node is None or node.op_type != self.op_type or node.domain not in _domains(self.domain):
            found = "a graph input" if value.is_graph_input else (
                "a constant" if value.is_constant else
                (node.qualified_op if node is not None else "nothing"))
            return state.fail("wrong_op", f"%{value.name}: expected {self.op_type}, found "
                              f"{found}", f"%{value.name}")
        for key, want in self.attrs.items():
            have = node.attr(key)
            if have != want and not (isinstance(want, tuple) and have is not None
                                     and tuple(have) == want):
                return state.fail("attribute_value",
                                  f"{node.name}: attribute {key}={have}, expected {want}",
                                  node.name)
        for key, want in self.sem.items():
            if node.sem.get(key, False) != want:
                return state.fail("meaning_differs", f"{node.name}: {key} is "
                                  f"{node.sem.get(key)}, expected {want}", node.name)
        if self.private and (len(value._uses) != 1 or value.is_graph_output):
            return state.fail("not_private", f"%{value.name} is read elsewhere too",
                              f"%{value.name}")
        reason = self._contract(node)
        if reason is None and self.check is not None:
            reason = self.check(node)
        if reason is not None:
            return state.fail(reason.code, f"{node.name}: {reason.text}", node.name)
        return node


    def _contract(self, node: Node) -> Refusal | None:
        """What the node has that the pattern did not say it takes, or None."""
        given = len(node.inputs)
        while given and node.inputs[given - 1] is None:
            given -= 1
        if given > len(self.inputs) and not self.other_inputs:
            return Refusal("extra_inputs", f"{given} inputs, the pattern takes "
                           f"{len(self.inputs)}", node.name)
        if self.other_attrs or node.domain not in STANDARD_DOMAINS:
            return None
        defaults = attribute_defaults(node.op_type)
        for key in node.attrs:
            if key in self.attrs or key in self.reads:
                continue
            if key not in defaults or node.attr(key) != defaults[key]:
                return Refusal("unhandled_attribute", f"attribute {key}={node.attr(key)!r} is "
                               "not one the pattern handles", node.name)
        return None


@dataclass(eq=False)
class Absent(Pat):
    """An omitted optional input (an input the node does not have, or gave as "")."""

    def match(self, value, state):
        return value is None or state.fail("unexpected_input",
                                           f"%{value.name}: expected no input here",
                                           f"%{value.name}")


@dataclass(eq=False)
class AnyOf(Pat):
    alternatives: tuple[Pat, ...]

    def match(self, value, state):
        for alt in self.alternatives:
            snapshot = state.save()
            if alt.match(value, state):
                return True
            state.restore(snapshot)
        return False

    def search(self, value, state):
        for alt in self.alternatives:
            yield from alt.search(value, state)


def _search_all(pats: tuple[Pat, ...], values: tuple[Value | None, ...], k: int,
                state: _State) -> Iterator[None]:
    """Every way ``values[k:]`` fit ``pats[k:]`` together, the earlier ones varying slowest."""
    if k == len(pats):
        yield
        return
    for _ in pats[k].search(values[k], state):
        yield from _search_all(pats, values, k + 1, state)


def _domains(domain: str) -> tuple[str, ...]:
    return tuple(STANDARD_DOMAINS) if domain in STANDARD_DOMAINS else (domain,)


class Builder:
    """``p`` in a rule's ``pattern(self, p)``: creates pattern nodes."""

    def var(self, name: str, *, dtype=None, rank=None, dims=None) -> Var:
        return Var(name, frozenset(dtype) if dtype else None, rank, tuple(dims) if dims else None)

    def const(self, name: str | None = None, *, value: float | None = None, scalar: bool = False,
              tolerance: float = 1e-6) -> Const:
        return Const(name, value, scalar, tolerance)

    def any(self, *alternatives: Pat) -> AnyOf:
        return AnyOf(tuple(alternatives))

    def optional(self, pattern: Pat, through: Pat) -> AnyOf:
        return AnyOf((pattern, through))

    def maybe(self, pattern: Pat) -> AnyOf:
        """``pattern``, or an omitted optional input."""
        return AnyOf((pattern, Absent()))

    def op(self, op_type: str, *inputs: Pat, **kw) -> Op:
        return Op(op_type, tuple(inputs), **kw)

    def __getattr__(self, op_type: str):
        if not op_type[:1].isupper():
            raise AttributeError(op_type)
        return lambda *inputs, **kw: Op(op_type, tuple(inputs), **kw)


@dataclass
class Failure:
    """How far a pattern got (nodes matched) and why it stopped there."""

    progress: int
    reason: Refusal


class _State:
    def __init__(self, trace: Trace) -> None:
        self.bindings: dict[str, Any] = {}
        self.by_pattern: dict[int, Value] = {}
        self.dims: dict[str, Any] = {}
        self.nodes: list[Node] = []
        self.progress = 0
        self.trace = trace

    def save(self):
        return (dict(self.bindings), dict(self.by_pattern), dict(self.dims), len(self.nodes),
                self.progress)

    def restore(self, snap) -> None:
        self.bindings, self.by_pattern, self.dims = dict(snap[0]), dict(snap[1]), dict(snap[2])
        del self.nodes[snap[3]:]
        self.progress = snap[4]

    def fail(self, code: str, text: str, subject: str = "") -> bool:
        """Record why matching stops here (a :class:`Refusal` is made only if it is the best
        so far) and answer False, for ``return state.fail(...)``."""
        self.trace.record(self.progress, code, text, subject)
        return False

    def unify_dims(self, value: Value, dims: tuple[Any, ...], label: str) -> bool:
        shape = value.shape
        if shape is None or len(shape) != len(dims):
            return self.fail("wrong_rank", f"%{value.name} ({label}) has shape {shape}, "
                             f"expected rank {len(dims)}", f"%{value.name}")
        for want, have in zip(dims, shape):
            if want is None or want == "_":
                continue
            if isinstance(want, int):
                if have != want:
                    return self.fail("wrong_dimension", f"%{value.name} ({label}): dimension "
                                     f"{have}, expected {want}", f"%{value.name}")
                continue
            bound = self.dims.get(want, _UNBOUND)
            if bound is _UNBOUND:
                self.dims[want] = have
            elif bound != have or have is None:
                return self.fail("dimension_mismatch", f"%{value.name} ({label}): dimension "
                                 f"{want} is {have} here but {bound} elsewhere in the match",
                                 f"%{value.name}")
        return True


_UNBOUND = object()


class Trace:
    """The furthest a pattern got (most nodes matched) and why it stopped there."""

    def __init__(self) -> None:
        self.best: Failure | None = None

    def record(self, progress: int, code: str, text: str, subject: str = "") -> None:
        if self.best is None or progress > self.best.progress:
            self.best = Failure(progress, Refusal(code, text, subject))


class Match:
    """A successful match: bindings as attributes (``m.x``), the matched nodes, the root.

    A name the pattern can bind but this match did not (an alternative not taken, an
    optional part absent) reads as ``None``; a name the pattern never binds raises — a typo
    in a rule is an error, not a silent ``None``.
    """

    def __init__(self, root: Node, state: _State, names: frozenset[str]) -> None:
        self.root = root
        self.nodes: list[Node] = list(dict.fromkeys(state.nodes))
        self.dims = dict(state.dims)
        self._bindings = dict(state.bindings)
        self._names = names

    def __getattr__(self, name: str):
        bindings = self.__dict__.get("_bindings", {})
        if name in bindings:
            return bindings[name]
        if name in self.__dict__.get("_names", ()):
            return None
        raise AttributeError(f"the pattern binds no {name!r} (it binds "
                             f"{', '.join(sorted(self.__dict__.get('_names', ()))) or 'nothing'})")

    def __repr__(self) -> str:
        return f"Match(root={self.root.name}, nodes={len(self.nodes)})"


def pattern_names(pattern: Pat) -> frozenset[str]:
    """Every name a pattern can bind (variables, named constants and nodes)."""
    names: set[str] = set()
    stack, seen = [pattern], set()
    while stack:
        pat = stack.pop()
        if id(pat) in seen:
            continue
        seen.add(id(pat))
        if isinstance(pat, (Var, Const, Op)) and pat.name:
            names.add(pat.name)
        if isinstance(pat, Op):
            stack.extend(pat.inputs)
        elif isinstance(pat, AnyOf):
            stack.extend(pat.alternatives)
    return frozenset(names)


def match_pattern(pattern: Pat, root: Node, trace: Trace,
                  names: frozenset[str] | None = None, *, exhaustive: bool = False,
                  accept: Callable[[Match], bool] | None = None) -> Match | None:
    """Match ``pattern`` against the first output of ``root`` (``names``: the pattern's
    :func:`pattern_names`, computed once per rule by the caller). Greedy by default;
    ``exhaustive`` searches every way it fits, in order, for the first that ``accept``
    approves (``accept`` given: a search too)."""
    state = _State(trace)
    names = names if names is not None else pattern_names(pattern)
    if not exhaustive and accept is None:
        return Match(root, state, names) if pattern.match(root.outputs[0], state) else None
    for _ in pattern.search(root.outputs[0], state):
        m = Match(root, state, names)
        if accept is None or accept(m):
            return m
    return None
