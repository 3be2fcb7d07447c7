"""Selection as a pure function: (fused node, target, registry) → choice and rejections."""

from __future__ import annotations

from dataclasses import dataclass

from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.select.kernel import Kernel


@dataclass
class Selection:
    node: str
    op: str
    chosen: Kernel
    rejected: list[tuple[Kernel, str]]

    def to_json(self) -> dict:
        return {"node": self.node, "op": self.op, "chosen": self.chosen.name,
                "rejected": {k.name: reason for k, reason in self.rejected}}


def select_kernel(node: Node, target: Target, registry: list[Kernel],
                  costs: dict[str, float] | None = None) -> Selection:
    """Pick the cheapest kernel whose capabilities cover the node; ties break by name."""
    candidates = [k for k in registry if k.implements == node.op_type]
    legal: list[Kernel] = []
    rejected: list[tuple[Kernel, str]] = []
    for k in candidates:
        reason = k.rejects(node, target)
        if reason:
            rejected.append((k, reason))
        else:
            legal.append(k)
    if not legal:
        raise LookupError(f"{node.name}: no kernel implements {node.op_type}")
    cost = (lambda k: (costs.get(k.name, k.cost), k.name)) if costs else (lambda k: (k.cost, k.name))
    legal.sort(key=cost)
    chosen = legal[0]
    for k in legal[1:]:
        rejected.append((k, f"legal, but ranked below {chosen.name}"))
    return Selection(node.name, node.op_type, chosen, rejected)
