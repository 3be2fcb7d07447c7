"""Values: the edges of the IR.

A Value has exactly one producer — a node output, a graph input, or a
constant — and knows every ``(node, input_index)`` that reads it. Only
:class:`~onnxopt.ir.graph.Graph`'s editing methods change use lists, so they
are always right; ``uses()`` hands out a snapshot so a pass may rewrite while
it walks them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onnxopt.ir.graph import Graph
    from onnxopt.ir.node import Node
    from onnxopt.ir.tensor import LazyTensor

Dim = int | str | None
"""One dimension: a size, a symbol such as ``"seq"``, or unknown (``None``)."""

Shape = tuple[Dim, ...] | None
"""A shape; ``None`` means even the rank is unknown."""


class Value:
    """A tensor flowing through the graph."""

    __slots__ = (
        "_uses",
        "const",
        "doc_string",
        "dtype",
        "graph",
        "index",
        "inexact",
        "name",
        "producer",
        "shape",
        "sym",
        "type_proto",
    )

    def __init__(self, name: str, dtype: str | None = None, shape: Shape = None) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.producer: Node | None = None
        self.index: int = -1
        self.const: LazyTensor | None = None
        self.graph: Graph | None = None
        self._uses: list[tuple[Node, int]] = []
        self.doc_string = ""
        # For small integer tensors computed from shapes: their elements, each an int, a
        # symbol such as "seq", or None (filled by normalize.shapes; shape-arithmetic folding).
        self.sym: tuple[Dim, ...] | None = None
        # The ONNX TypeProto of a value that is not a plain tensor (sequence, optional, map,
        # sparse tensor), kept verbatim so it survives a round trip; None for tensors.
        self.type_proto = None
        # The non-exact rewrites whose results this value holds (onnxopt.ir.exactness).
        self.inexact: frozenset[str] = frozenset()

    # --- what produces it -------------------------------------------------------------------
    @property
    def is_constant(self) -> bool:
        return self.const is not None

    @property
    def is_graph_input(self) -> bool:
        return self.producer is None and self.graph is not None and self in self.graph.inputs

    @property
    def is_graph_output(self) -> bool:
        g = self.graph
        return g is not None and self in g.output_set()

    # --- who reads it -----------------------------------------------------------------------
    def uses(self) -> list[tuple[Node, int]]:
        """A snapshot of ``(node, input_index)`` pairs that read this value."""
        return list(self._uses)

    @property
    def num_uses(self) -> int:
        return len(self._uses)

    def consumers(self) -> list[Node]:
        """Distinct nodes that read this value, in use order."""
        seen: list[Node] = []
        for node, _ in self._uses:
            if not any(node is s for s in seen):
                seen.append(node)
        return seen

    # --- shape helpers ----------------------------------------------------------------------
    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def type_str(self) -> str:
        dt = self.dtype or "?"
        if self.shape is None:
            return f"{dt}[?]" if self.dtype else "?"
        dims = ", ".join("?" if d is None else str(d) for d in self.shape)
        return f"{dt}[{dims}]"

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type_str()}"
