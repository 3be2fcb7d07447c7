"""Graphs: inputs, outputs, constants and nodes in topological order.

Nodes sit in a doubly linked list so that inserting or removing one costs
O(1) and a walk survives removals of the node it stands on. Every edit that
touches a value's readers goes through this class, which keeps use lists
exact; the cost of an edit is proportional to the values it touches, never to
the size of the graph. Subgraphs (If/Loop/Scan bodies) are Graphs whose
``parent`` is the node that owns them; they may read values of enclosing
graphs by reference.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from onnxopt.ir.exactness import dying_sites, record
from onnxopt.ir.node import Attr, Node
from onnxopt.ir.printer import format_graph
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Shape, Value


class EditListener:
    """What a rewrite driver hears of the edits made to a model's graphs (all of them: the
    listener sits on the model's :class:`NameScope`, which every subgraph shares).

    The driver learns from these which nodes to look at again — the node inserted, the
    readers of a value replaced, the node whose input changed — rather than from a pass's
    own count of what it did. Each method is called after the edit is made; the defaults do
    nothing, so a listener overrides only what it needs."""

    def node_inserted(self, node: Node) -> None:
        """``node`` was placed in a graph (made, or moved)."""

    def node_removed(self, node: Node, inputs: list[Value]) -> None:
        """``node`` left its graph; it read ``inputs`` (released now: each has a reader
        fewer)."""

    def input_changed(self, node: Node, old: Value | None, new: Value | None) -> None:
        """``node`` reads ``new`` where it read ``old``."""

    def uses_replaced(self, old: Value, new: Value, readers: list[Node]) -> None:
        """Every reader of ``old`` (``readers``, in use order) now reads ``new``."""

    def constant_removed(self, value: Value) -> None:
        """``value``, an unread constant, left its graph."""

    def node_changed(self, node: Node) -> None:
        """``node`` was changed in place (attributes, meaning, or the facts inferred on its
        outputs): :meth:`Graph.changed` says so."""


class NameScope:
    """Names already taken in a model (shared by a graph and all its subgraphs), and the
    listeners of every edit made to them (:class:`EditListener`)."""

    __slots__ = ("_counters", "inexact_recorded", "listeners", "taken")

    def __init__(self) -> None:
        self.taken: set[str] = set()
        self._counters: dict[str, int] = {}
        # Who hears of edits (a rewrite driver while it runs): a tuple, empty when nobody
        # listens, so an edit pays one truth test when none is there.
        self.listeners: tuple[EditListener, ...] = ()
        # Whether a non-exact rewrite was recorded anywhere in the model (onnxopt.ir.exactness):
        # until one is, edits have no sites to carry along and skip looking for them.
        self.inexact_recorded = False

    def claim(self, name: str) -> str:
        self.taken.add(name)
        return name

    def fresh(self, hint: str) -> str:
        """A name starting with ``hint`` that nothing in the model uses yet."""
        if hint not in self.taken:
            return self.claim(hint)
        n = self._counters.get(hint, 0)
        while True:
            n += 1
            candidate = f"{hint}_{n}"
            if candidate not in self.taken:
                self._counters[hint] = n
                return self.claim(candidate)


class Graph:
    """A computation graph with exact use lists."""

    __slots__ = (
        "_count",
        "_head",
        "_output_set",
        "_owners",
        "constants",
        "declared_output_types",
        "doc_string",
        "input_defaults",
        "inputs",
        "name",
        "names",
        "opaque_initializers",
        "outputs",
        "parent",
    )

    def __init__(self, name: str = "main", *, parent: Node | None = None,
                 names: NameScope | None = None) -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.constants: dict[str, Value] = {}
        self.parent = parent
        self.names = names if names is not None else NameScope()
        self.doc_string = ""
        self._head = Node("<head>")
        self._head._prev = self._head._next = self._head
        self._count = 0
        self._owners = 0  # nodes holding subgraphs: when none, walks need not ask each node
        self._output_set: set[Value] | None = None
        # Initializers that share a name with a graph input: defaults a caller may override.
        self.input_defaults: dict[str, LazyTensor] = {}
        # Initializers no pass reads — sparse ones, dense ones whose data onnxopt cannot read
        # (an unknown element type, segments, a size that does not fit), names given twice —
        # kept as their protos, with the Value nodes read (None for a graph input's):
        # name -> (Value | None, [Sparse/TensorProto, ...]).
        self.opaque_initializers: dict[str, tuple[Value | None, list]] = {}
        # A subgraph read from a file: the types its outputs were declared with (TypeProtos,
        # by position), written back as they were. Inferring more than the file said can make
        # ONNX Runtime's load-time checks stricter than its kernels (a [1]-shaped If output
        # fed to Range, which accepts one element at run time but wants a scalar at load).
        self.declared_output_types: list | None = None

    # --- walking ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Node]:
        """Nodes in order; safe while nodes are removed or inserted during the walk."""
        cur = self._head._next
        while cur is not self._head:
            if cur.graph is self:
                yield cur
            cur = cur._next
            while cur is not self._head and cur.graph is not self:
                cur = cur._next

    def __len__(self) -> int:
        return self._count

    @property
    def holds_subgraphs(self) -> bool:
        """Whether a node of this graph owns a subgraph (counted as nodes come and go)."""
        return self._owners > 0

    def reversed(self) -> Iterator[Node]:
        """Nodes in reverse order; safe while the node just yielded is removed."""
        cur = self._head._prev
        while cur is not self._head:
            if cur.graph is self:
                yield cur
            cur = cur._prev

    def all_graphs(self) -> list[Graph]:
        """This graph and every subgraph below it (If/Loop/Scan bodies), outer graphs first.
        A list taken before the caller walks it: a rewrite may add or drop subgraphs meanwhile."""
        out: list[Graph] = []
        stack = [self]
        while stack:
            g = stack.pop()
            out.append(g)
            if g.holds_subgraphs:
                for node in g:
                    stack.extend(node.subgraphs())
        return out

    def all_nodes(self) -> Iterator[Node]:
        """Every node, subgraphs included (depth first)."""
        if not self.holds_subgraphs:
            yield from self
            return
        for node in self:
            yield node
            for sub in node.subgraphs():
                yield from sub.all_nodes()

    def output_set(self) -> set[Value]:
        if self._output_set is None:
            self._output_set = set(self.outputs)
        return self._output_set

    def root(self) -> Graph:
        g = self
        while g.parent is not None and g.parent.graph is not None:
            g = g.parent.graph
        return g

    # --- creating values --------------------------------------------------------------------
    def add_input(self, name: str, dtype: str | None, shape: Shape) -> Value:
        v = Value(self.names.claim(name), dtype, shape)
        v.graph = self
        self.inputs.append(v)
        return v

    def add_constant(self, tensor: LazyTensor, name: str | None = None, *, hint: str = "const",
                     exact_name: bool = False) -> Value:
        """Add a constant (an initializer when exported) and return its Value."""
        name = self.names.claim(name) if (name and exact_name) else self.names.fresh(name or hint)
        v = Value(name, tensor.dtype, tensor.shape)
        v.const = tensor
        v.graph = self
        self.constants[name] = v
        return v

    def set_outputs(self, outputs: Iterable[Value]) -> None:
        self.outputs = list(outputs)
        self._output_set = None

    # --- creating and placing nodes ---------------------------------------------------------
    def make_node(self, op_type: str, inputs: Iterable[Value | None], *, num_outputs: int = 1,
                  domain: str = "", attrs: dict[str, Attr] | None = None, name: str = "",
                  output_names: Iterable[str] | None = None, before: Node | None = None,
                  created_by: str = "") -> Node:
        """Create a node, wire its inputs and insert it (at the end, or before ``before``)."""
        node = Node(op_type, domain, name or self.names.fresh(f"{op_type}"))
        node.attrs = dict(attrs or {})
        node.created_by = created_by
        hints = list(output_names or [])
        for i in range(num_outputs):
            out_name = hints[i] if i < len(hints) else self.names.fresh(f"{node.name}_out{i}")
            if i < len(hints):
                self.names.claim(out_name)
            v = Value(out_name)
            v.producer, v.index, v.graph = node, i, self
            node.outputs.append(v)
        for v in inputs:
            self._append_input(node, v)
        if before is None:
            self.append(node)
        else:
            self.insert_before(before, node)
        return node

    def _append_input(self, node: Node, value: Value | None) -> None:
        node._inputs.append(value)
        if value is not None:
            value._uses.append((node, len(node._inputs) - 1))

    def append(self, node: Node) -> None:
        self.insert_before(self._head, node)

    def insert_before(self, ref: Node, node: Node) -> None:
        if node.graph is not None:
            raise ValueError(f"node {node.name} already belongs to a graph")
        node.graph = self
        prev = ref._prev
        node._prev, node._next = prev, ref
        prev._next = node
        ref._prev = node
        self._count += 1
        if node.subgraphs():
            self._owners += 1
        for out in node.outputs:
            out.graph = self
        if self.names.listeners:
            for listener in self.names.listeners:
                listener.node_inserted(node)

    def move_before(self, ref: Node, node: Node) -> None:
        """Move a node of this graph so that it sits right before ``ref`` (listeners hear of
        it as an insertion: its place changed, and with it what a walk in order sees)."""
        self._unlink(node)
        node.graph = None
        self.insert_before(ref, node)

    # --- editing inputs and uses ------------------------------------------------------------
    def set_input(self, node: Node, index: int, value: Value | None) -> None:
        """Make ``node`` read ``value`` at ``index`` (``None`` omits an optional input)."""
        while len(node._inputs) <= index:
            node._inputs.append(None)
        old = node._inputs[index]
        if old is not None:
            _drop_use(old, node, index)
        node._inputs[index] = value
        if value is not None:
            value._uses.append((node, index))
        if old is not None and self.names.inexact_recorded and not old._uses:
            # ``node`` now reads past ``old``: what ``old`` held of non-exact rewrites is now
            # in what ``node`` computes.
            sites = dying_sites(old)
            for out in node.outputs:
                record(out, sites)
        if self.names.listeners and old is not value:
            for listener in self.names.listeners:
                listener.input_changed(node, old, value)

    def set_inputs(self, node: Node, values: Iterable[Value | None]) -> None:
        before = node._inputs
        for i, old in enumerate(before):
            if old is not None:
                _drop_use(old, node, i)
        node._inputs = []
        for v in values:
            self._append_input(node, v)
        if self.names.listeners:
            for i in range(max(len(before), len(node._inputs))):
                old = before[i] if i < len(before) else None
                new = node._inputs[i] if i < len(node._inputs) else None
                if old is not new:
                    for listener in self.names.listeners:
                        listener.input_changed(node, old, new)

    def replace_all_uses(self, old: Value, new: Value, *, outputs: bool = False) -> None:
        """Make every reader of ``old`` read ``new``.

        A graph output is rewired only with ``outputs=True``: replacing it
        changes the model's interface (its name), which a pass must mean to do.
        """
        if old is new:
            return
        if not outputs and old in self.output_set():
            raise ValueError(f"{old.name} is a graph output; pass outputs=True to rewire it")
        uses = old.uses()
        for node, index in uses:
            node._inputs[index] = new
            new._uses.append((node, index))
        old._uses.clear()
        if outputs:
            self._replace_output(old, new)
        if self.names.inexact_recorded:
            record(new, dying_sites(old))
        if self.names.listeners:
            readers = [node for node, _ in uses]
            for listener in self.names.listeners:
                listener.uses_replaced(old, new, readers)

    def changed(self, node: Node) -> None:
        """Say that ``node`` was changed in place — an attribute, its meaning (``sem``), the
        facts inferred on its outputs — which no edit of inputs or uses shows: the listeners
        (a rewrite driver) look at it, and at what reads it, again."""
        if self.names.listeners:
            for listener in self.names.listeners:
                listener.node_changed(node)

    def _replace_output(self, old: Value, new: Value) -> None:
        if old in self.output_set():
            self.outputs = [new if o is old else o for o in self.outputs]
            self._output_set = None

    # --- removing ---------------------------------------------------------------------------
    def remove(self, nodes: Node | Iterable[Node], *, safe: bool = True) -> None:
        """Remove nodes; with ``safe``, refuse if an output is still read by a node not removed."""
        batch = [nodes] if isinstance(nodes, Node) else list(nodes)
        doomed = set(map(id, batch))
        if safe:
            for node in batch:
                for out in node.outputs:
                    if out in self.output_set():
                        raise ValueError(f"cannot remove {node.name}: {out.name} is a graph output")
                    for user, _ in out._uses:
                        if id(user) not in doomed:
                            raise ValueError(
                                f"cannot remove {node.name}: {out.name} is still read by {user.name}")
        for node in batch:
            read = [v for v in node._inputs if v is not None] if self.names.listeners else []
            for i, v in enumerate(node._inputs):
                if v is not None:
                    _drop_use(v, node, i)
            node._inputs = [None] * len(node._inputs)
            # A subgraph's reads of enclosing values are recorded on those values: a removed
            # If/Loop must release them, or its producers look used forever.
            for sub in node.subgraphs():
                sub.remove(list(sub), safe=False)
            self._unlink(node)
            node.graph = None
            if self.names.listeners:
                for listener in self.names.listeners:
                    listener.node_removed(node, read)

    def _unlink(self, node: Node) -> None:
        if node.graph is not self:
            raise ValueError(f"node {node.name} is not in graph {self.name}")
        node._prev._next = node._next
        node._next._prev = node._prev
        # node._next is deliberately kept: a walk standing on a removed node continues from it.
        self._count -= 1
        if node.subgraphs():
            self._owners -= 1

    def remove_constant(self, value: Value) -> None:
        if value._uses:
            raise ValueError(f"constant {value.name} is still read")
        self.constants.pop(value.name, None)
        if self.names.listeners:
            for listener in self.names.listeners:
                listener.constant_removed(value)

    def __repr__(self) -> str:
        return format_graph(self)


def _drop_use(value: Value, node: Node, index: int) -> None:
    """Remove one (reader, input index) from a use list. The newest entry is the usual one (a
    rewrite rewires what it just wired); otherwise ``list.index`` finds it, comparing in C
    (nodes by identity): a value read thousands of times — a shape shared by every layer —
    loses its readers one by one when duplicates of them are merged, and a scan in Python
    per removal made that quadratic."""
    uses = value._uses
    if uses and uses[-1][0] is node and uses[-1][1] == index:
        uses.pop()
        return
    try:
        del uses[uses.index((node, index))]
    except ValueError:
        raise AssertionError(f"use list of {value.name} lacks ({node.name}, {index})") from None
