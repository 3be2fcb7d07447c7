"""One rewrite driver, fed by the graph's edit events.

Two granularities share one source of truth, the edits themselves
(:class:`onnxopt.ir.graph.EditListener`):

- :func:`run_to_fixed_point` runs whole-graph rewrites (the normalization passes) in their
  order, each again only when the graph was edited since it last began — by any rewrite,
  itself included — until none was. A rewrite returns a :class:`PassResult`; nothing counts
  rounds and no pass keeps a "stale" flag: an edit is what makes a rewrite due. A rewrite
  said in the pattern language (:class:`onnxopt.rewrite.pattern.PatternRewrite`) is also
  handed the nodes those edits touched, and tries only the nodes within its pattern's reach
  of them. Its ``once_settled`` rewrites run only where the others settled, and their
  edits set the others going again: after fusion the pipeline continues so, fusing again
  where normalization removed fused nodes (:func:`onnxopt.pipeline.fuse_and_settle`).
- :class:`NodeWorklist` holds nodes to try, in order (the fusion rules' roots): an edit
  queues the nodes it touched — a node inserted, the readers of a value replaced, a node whose
  input changed or that was changed in place.

A pair of rewrites that undo each other would never settle; :data:`SWEEP_LIMIT` is the
internal check that says so, naming them, instead of hanging the tool.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from onnxopt.ir.graph import EditListener, Graph, NameScope
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.ir.verifier import verify_graph


@dataclass(frozen=True)
class PassResult:
    """What one run of a rewrite did: ``changed`` rewrites made (what the report counts by
    pass). Edits that change no count (shape facts updated) reach the driver as events."""

    changed: int = 0

    def __bool__(self) -> bool:
        return self.changed > 0

    def __add__(self, other: PassResult) -> PassResult:
        return PassResult(self.changed + other.changed)


Rewrite = Callable[[Model], PassResult]
"""A whole-graph rewrite. One with ``incremental = True`` also takes ``around``: the nodes
edits touched since it last began (:class:`EditLog`), ``None`` the first time (all)."""

# Sweeps over the rewrite list that made edits, past which the rewrites are taken not to
# settle. Shipped models settle in at most 5; a rewrite that undoes another's work would go on
# for ever, and this check stops it with their names (an internal error, not a silent stop).
SWEEP_LIMIT = 100


class RewriteLoop(AssertionError):
    """Rewrites kept editing the graph past :data:`SWEEP_LIMIT` sweeps: a pair that undoes
    each other (a bug in them)."""


class EditLog(EditListener):
    """Counts edits, and keeps the nodes they touched in order: the node edited, and the
    producers of the values that gained or lost a reader (their use counts changed).
    ``touched[k:]`` is what edits reached since the log was ``k`` long: an incremental
    rewrite looks again only around those (:class:`onnxopt.rewrite.pattern.PatternRewrite`).
    A rewrite is due when ``edits`` moved since it last began."""

    __slots__ = ("edits", "touched")

    def __init__(self) -> None:
        self.edits = 0
        self.touched: list[Node] = []

    def take(self) -> list[Node]:
        """What was touched so far, and start afresh."""
        touched, self.touched = self.touched, []
        return touched

    def _values(self, *values: Value | None) -> None:
        for v in values:
            if v is not None and v.producer is not None:
                self.touched.append(v.producer)

    def node_inserted(self, node: Node) -> None:
        self.edits += 1
        self.touched.append(node)

    def node_removed(self, node: Node, inputs: list[Value]) -> None:
        self.edits += 1
        self._values(*inputs)

    def input_changed(self, node: Node, old: Value | None, new: Value | None) -> None:
        self.edits += 1
        self.touched.append(node)
        self._values(old, new)

    def uses_replaced(self, old: Value, new: Value, readers: list[Node]) -> None:
        self.edits += 1
        self.touched.extend(readers)
        self._values(old, new)

    def constant_removed(self, value: Value) -> None:
        self.edits += 1

    def node_changed(self, node: Node) -> None:
        self.edits += 1
        self.touched.append(node)


class listening:
    """``with listening(scope, listener):`` — ``listener`` hears every edit of the model whose
    names ``scope`` holds, until the block ends."""

    def __init__(self, scope: NameScope, listener: EditListener) -> None:
        self.scope, self.listener = scope, listener

    def __enter__(self) -> EditListener:
        self.scope.listeners = (*self.scope.listeners, self.listener)
        return self.listener

    def __exit__(self, *_exc) -> None:
        self.scope.listeners = tuple(x for x in self.scope.listeners if x is not self.listener)


def run_to_fixed_point(model: Model, rewrites: list[tuple[str, Rewrite]], *,
                       debug: bool = False,
                       once_settled: Sequence[tuple[str, Rewrite]] = ()
                       ) -> dict[str, PassResult]:
    """Run ``rewrites`` in order, each whenever the graph was edited since it last began
    (every one at first), until a sweep runs none; under ``debug`` verify the IR after each.
    ``once_settled`` rewrites run the same way, but only where ``rewrites`` have settled (a
    sweep of them edited nothing): what they edit sets ``rewrites`` going again (the pipeline
    re-fuses so, after normalization). Returns what each did in all, for the rewrites that
    changed something."""
    log = EditLog()
    everything = [*rewrites, *once_settled]
    began_at: dict[str, int] = dict.fromkeys((name for name, _ in everything), -1)
    totals: dict[str, int] = dict.fromkeys(began_at, 0)
    # Where each incremental rewrite last began in ``log.touched``.
    touches = {name: -1 for name, rewrite in everything
               if getattr(rewrite, "incremental", False)}
    sweeps = 0

    def sweep(group: list[tuple[str, Rewrite]]) -> list[str]:
        ran: list[str] = []
        for name, rewrite in group:
            if began_at[name] == log.edits:
                continue  # nothing was edited since it last looked: it would find nothing
            first = began_at[name] < 0
            began_at[name] = start = log.edits
            if name in touches:
                around = None if first else log.touched[touches[name]:]
                touches[name] = len(log.touched)
                result = rewrite(model, around=around)
            else:
                result = rewrite(model)
            totals[name] += result.changed
            if log.edits != start:
                ran.append(name)
            elif result.changed:
                raise AssertionError(f"rewrite {name} counted {result.changed} change(s) "
                                     "the graph did not hear of (Graph.changed says an "
                                     "edit made in place)")
            if debug:
                verify_graph(model.graph)
        return ran

    with listening(model.graph.names, log):
        while True:
            ran = sweep(rewrites) or sweep(once_settled)
            if not ran:
                break
            sweeps += 1
            if sweeps > SWEEP_LIMIT:
                raise RewriteLoop(f"rewrites did not settle after {SWEEP_LIMIT} sweeps; still "
                                  f"editing: {', '.join(ran)} (a pair that undoes each other?)")
    if debug:
        _check_settled(model, everything, touches)
    return {name: PassResult(n) for name, n in totals.items() if n}


def _check_settled(model: Model, rewrites: list[tuple[str, Rewrite]], touches) -> None:
    """Under ``debug``: an incremental rewrite walked over the whole graph finds nothing
    more — its edits led it to every node where it could still match."""
    for name, rewrite in rewrites:
        if name in touches:
            missed = rewrite(model, around=None).changed
            if missed:
                raise AssertionError(f"rewrite {name} missed {missed} match(es) that no edit "
                                     "it heard of led it back to")


class NodeWorklist(EditListener):
    """Nodes of one graph to try, in the order they were queued, each queued once at a time.
    Edits queue what they touched (those ``accept`` takes): the readers of a replaced value,
    a node whose input changed or that was changed in place, and the node inserted."""

    def __init__(self, graph: Graph, nodes: Iterable[Node], accept: Callable[[Node], bool]
                 ) -> None:
        self.graph, self.accept = graph, accept
        self._work: deque[Node] = deque()
        self._queued: set[int] = set()
        # While a rewrite runs (:meth:`rewriting`): what its edits touched, and what it made.
        self._touched: list[Node] | None = None
        self._made: list[Node] = []
        for node in nodes:
            self.push(node)

    def push(self, node: Node) -> None:
        if id(node) in self._queued or node.graph is not self.graph or not self.accept(node):
            return
        self._work.append(node)
        self._queued.add(id(node))

    def __iter__(self) -> Iterator[Node]:
        """Pop nodes until none is left; a node removed meanwhile is skipped."""
        while self._work:
            node = self._work.popleft()
            self._queued.discard(id(node))
            if node.graph is self.graph:
                yield node

    @contextmanager
    def rewriting(self) -> Iterator[None]:
        """``with worklist.rewriting():`` around one rewrite: what its edits touched is queued
        when it ends, the nodes it touched (the readers of its results first) before the
        nodes it made."""
        self._touched, self._made = [], []
        try:
            yield
        finally:
            touched, made = self._touched, self._made
            self._touched, self._made = None, []
            for node in (*touched, *made):
                self.push(node)

    def _heard(self, node: Node) -> None:
        if self._touched is None:
            self.push(node)
        else:
            self._touched.append(node)

    # --- the events -------------------------------------------------------------------------
    def node_inserted(self, node: Node) -> None:
        if self._touched is None:
            self.push(node)
        else:
            self._made.append(node)

    def input_changed(self, node: Node, old: Value | None, new: Value | None) -> None:
        self._heard(node)

    def uses_replaced(self, old: Value, new: Value, readers: list[Node]) -> None:
        for node in readers:
            self._heard(node)

    def node_changed(self, node: Node) -> None:
        self._heard(node)
