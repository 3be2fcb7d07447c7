"""Capability checks that more than one kernel family makes, each a :class:`Refusal` or None."""

from __future__ import annotations

from onnxopt.ir.node import Node
from onnxopt.ops import AttentionAttrs
from onnxopt.refusal import Refusal, refusal


def no_softcap(attrs: AttentionAttrs) -> Refusal | None:
    """Refuses soft-capped scores (for a kernel that does not cap them)."""
    if not attrs.softcap:
        return None
    return refusal("softcap_not_supported", "does not soft-cap the scores (the node caps them "
                   f"at {attrs.softcap:g})")


def bnsh_inputs(node: Node) -> Refusal | None:
    """Refuses Q, K and V that are not rank-4 [B, H, S, D] with static heads and head sizes
    (for a kernel whose head counts are attributes)."""
    q, k, v = node.inputs[:3]
    if q.rank != 4 or k.rank != 4 or v.rank != 4:
        return refusal("not_bnsh", f"needs rank-4 [B, H, S, D] inputs; %{q.name} has rank "
                       f"{q.rank}", q.name)
    for value in (q, k, v):
        if not isinstance(value.shape[1], int) or not isinstance(value.shape[3], int):
            return refusal("dynamic_heads", f"%{value.name}: heads and head size must be "
                           f"static, got {list(value.shape)}", value.name)
    return None
