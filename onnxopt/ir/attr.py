"""Attributes: a value with its ONNX attribute type, and the subgraphs some of them hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onnxopt.ir.graph import Graph


@dataclass(slots=True)
class Attr:
    """An attribute value with its ONNX attribute type code (kept for exact round trips)."""

    type: int
    value: Any


_GRAPH, _GRAPHS = 5, 10  # AttributeProto.GRAPH, AttributeProto.GRAPHS
GRAPH_ATTR_TYPES = frozenset((_GRAPH, _GRAPHS))


def subgraphs_of(a: Attr) -> list[Graph]:
    """The graphs an attribute holds: its type says so (a function body's reference to its
    caller's attribute, ``("ref", name)``, holds none)."""
    if a.type == _GRAPH and not _is_reference(a.value):
        return [a.value]
    if a.type == _GRAPHS and not _is_reference(a.value):
        return list(a.value)
    return []


def _is_reference(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and value[0] in ("ref", "proto")
