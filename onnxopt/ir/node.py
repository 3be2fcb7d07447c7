"""Nodes: operations with ordered inputs, outputs and attributes.

A node's op is named by ``(domain, op_type)`` as in ONNX, but the IR also
records meaning that ONNX spelling hides (``sem``): explicit reduction axes,
MatMul transposition flags, layout. Inputs are read-only from outside; change
them through :meth:`Graph.set_input` so use lists stay right.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onnxopt.ir.attr import GRAPH_ATTR_TYPES, Attr, subgraphs_of
from onnxopt.ir.printer import format_node

if TYPE_CHECKING:
    from onnxopt.ir.graph import Graph
    from onnxopt.ir.value import Value

__all__ = ["LEGACY_DOMAIN", "OPAQUE_OP", "STANDARD_DOMAINS", "Attr", "Node"]

STANDARD_DOMAINS = frozenset({"", "ai.onnx"})
"""The ONNX domain's two spellings."""

LEGACY_DOMAIN = "onnxopt.legacy"
OPAQUE_OP = "Opaque"  # the op type such a node has in the IR; ``sem["onnx_op"]`` keeps its own
"""Where standard-domain nodes of a meaning onnxopt does not model wait, untouched, until
export (see :mod:`onnxopt.ir.opset_spelling`); ``sem["onnx_domain"]`` keeps their domain."""


class Node:
    """One operation in a graph."""

    __slots__ = (
        "_inputs",
        "_next",
        "_prev",
        "anonymous",
        "attrs",
        "created_by",
        "doc_string",
        "domain",
        "graph",
        "inferred_from",
        "metadata",
        "name",
        "op_type",
        "outputs",
        "overload",
        "sem",
    )

    def __init__(self, op_type: str, domain: str = "", name: str = "") -> None:
        self.op_type = op_type
        self.domain = domain
        self.name = name
        self._inputs: list[Value | None] = []
        self.outputs: list[Value] = []
        self.attrs: dict[str, Attr] = {}
        self.sem: dict[str, Any] = {}
        self.graph: Graph | None = None
        self._prev: Node | None = None
        self._next: Node | None = None
        self.created_by = ""
        self.doc_string = ""
        self.overload = ""
        self.metadata: dict[str, str] = {}
        # The file gave this node no name: the IR names it (so reasons can point at it), the
        # exporter writes it back nameless (names are bytes, and a round trip adds none).
        self.anonymous = False
        # What shape inference last read and wrote here (normalize.shapes): it runs the node's
        # rule again only where that changed.
        self.inferred_from: tuple | None = None

    @property
    def inputs(self) -> tuple[Value | None, ...]:
        """Inputs in order; ``None`` marks an omitted optional input."""
        return tuple(self._inputs)

    def input(self, i: int) -> Value | None:
        return self._inputs[i] if i < len(self._inputs) else None

    @property
    def output(self) -> Value:
        """The first output — most ops have one."""
        return self.outputs[0]

    def attr(self, name: str, default: Any = None) -> Any:
        a = self.attrs.get(name)
        return default if a is None else a.value

    def subgraphs(self) -> list[Graph]:
        """The graphs this node owns (If branches, Loop/Scan bodies), in attribute order."""
        out: list[Graph] = []
        for a in self.attrs.values():
            if a.type in GRAPH_ATTR_TYPES:  # (checked here: every pass walks every node)
                out.extend(subgraphs_of(a))
        return out

    @property
    def onnx_op(self) -> tuple[str, str]:
        """(domain, op type) as the file spells them (an opaque node's own, not the IR's)."""
        if self.domain == LEGACY_DOMAIN:
            return self.sem.get("onnx_domain", ""), self.sem.get("onnx_op", self.op_type)
        return self.domain, self.op_type

    @property
    def qualified_op(self) -> str:
        domain, op_type = self.onnx_op
        return op_type if domain in STANDARD_DOMAINS else f"{domain}::{op_type}"

    def __repr__(self) -> str:
        return format_node(self)
