"""Fused operators: schema, decomposition into standard ONNX, NumPy reference.

Fused ops live in domain ``ai.onnxopt`` and are abstract: they say *what* is
computed (``AttentionFused``), never *how*. Each one defines

- its schema (inputs, outputs, attributes with defaults), checked when a rule
  creates one (:class:`onnxopt.ir.builder.NodeBuilder` with ``schemas=FUSED_OPS``);
- ``decompose``: standard ONNX ops computing the same function, so a model is
  runnable when no faster kernel is legal;
- ``reference``: a NumPy implementation with the same semantics, used by tests
  and as the CPU kernel of the custom-op bridge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from onnxopt.ir.node import Node
from onnxopt.ir.value import Value


@dataclass(frozen=True)
class FusedOp:
    name: str
    inputs: tuple[str, ...]  # "name" or "name?" for optional
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)  # name -> default
    decompose: Callable[[Any, Node], list[Value]] | None = None
    reference: Callable[..., Any] | None = None
    doc: str = ""

    def attr(self, node: Node, name: str) -> Any:
        return node.attr(name, self.attrs.get(name))

    def attributes(self, node: Node) -> dict[str, Any]:
        return {k: node.attr(k, default) for k, default in self.attrs.items()}
