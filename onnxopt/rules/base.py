"""What a fusion rule is, and the builder its rewrite uses.

A rule reads top to bottom: the rewrite in arrow form (its docstring's first
line), ``pattern``, ``legal`` (``None`` or a sentence), ``rewrite``. The
driver checks the shared predicate — no intermediate of the match may be read
outside it — before calling ``legal``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from onnx import AttributeProto

from onnxopt.importer.semantics import annotate
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Attr, Node
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Value
from onnxopt.legality.target import Target
from onnxopt.match.pattern import Builder, Match, Pat

FUSED_DOMAIN = "ai.onnxopt"


class Rule:
    """Base class of fusion rules."""

    name: ClassVar[str] = ""
    root: ClassVar[str | tuple[str, ...]] = ""  # the op type(s) a match can end at
    fused_op: ClassVar[str] = ""

    def begin(self, model) -> None:
        """Called once per run before matching (rules that analyse the model keep it)."""

    def pattern(self, p: Builder) -> Pat:  # pragma: no cover - abstract
        raise NotImplementedError

    def legal(self, m: Match, target: Target) -> str | None:
        return None

    def rewrite(self, b: RewriteBuilder, m: Match) -> Value | list[Value]:  # pragma: no cover
        raise NotImplementedError

    def describe(self, m: Match) -> str:
        """One line for explain: what the match is (override to add attributes)."""
        return f"{len(m.nodes)} nodes"


def make_attr(value: Any) -> Attr:
    """A Python value → a typed attribute."""
    if isinstance(value, Attr):
        return value
    if isinstance(value, bool):
        return Attr(AttributeProto.INT, int(value))
    if isinstance(value, (int, np.integer)):
        return Attr(AttributeProto.INT, int(value))
    if isinstance(value, (float, np.floating)):
        return Attr(AttributeProto.FLOAT, float(value))
    if isinstance(value, str):
        return Attr(AttributeProto.STRING, value)
    if isinstance(value, LazyTensor):
        return Attr(AttributeProto.TENSOR, value)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
            return Attr(AttributeProto.INTS, tuple(int(v) for v in value))
        if all(isinstance(v, (int, float, np.number)) for v in value):
            return Attr(AttributeProto.FLOATS, tuple(float(v) for v in value))
        if all(isinstance(v, str) for v in value):
            return Attr(AttributeProto.STRINGS, tuple(value))
    raise TypeError(f"cannot make an attribute from {value!r}")


class RewriteBuilder:
    """Creates nodes before ``anchor`` in ``graph``, stamped with the rule's name."""

    def __init__(self, graph: Graph, anchor: Node, created_by: str) -> None:
        self.graph = graph
        self.anchor = anchor
        self.created_by = created_by
        self.nodes: list[Node] = []

    def op(self, op_type: str, *inputs: Value | None, domain: str = "", outputs: int = 1,
           name: str | None = None, **attrs: Any) -> Any:
        """Add a node; returns its output Value (or a list when ``outputs > 1``)."""
        node = self.graph.make_node(
            op_type, inputs, num_outputs=outputs, domain=domain,
            attrs={k: make_attr(v) for k, v in attrs.items() if v is not None},
            name=self.graph.names.fresh(name or f"{self.created_by}/{op_type}"),
            before=self.anchor, created_by=self.created_by)
        annotate(node)
        self.nodes.append(node)
        return node.outputs if outputs > 1 else node.outputs[0]

    def fused(self, op_type: str, *inputs: Value | None, outputs: int = 1, **attrs: Any) -> Any:
        return self.op(op_type, *inputs, domain=FUSED_DOMAIN, outputs=outputs, **attrs)

    def const(self, array: Any, hint: str = "const") -> Value:
        arr = np.asarray(array)
        return self.graph.add_constant(LazyTensor.from_array(arr), hint=f"{self.created_by}/{hint}")
