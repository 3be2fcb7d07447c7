"""Fused operators in domain ai.onnxopt: typed contract, decomposition, NumPy reference.

``FUSED_OPS`` is the one table of them, by name: the builder checks new fused nodes
against it, selection finds each op's attribute record and decomposition in it.
:func:`attributes_of` is how anything reads a fused node's attributes.
"""

from onnxopt.ir.node import Node
from onnxopt.ops.activations import GELU, SILU, SWIGLU, GeluAttrs, SiluAttrs, SwiGLUAttrs
from onnxopt.ops.attention import ATTENTION, AttentionAttrs
from onnxopt.ops.base import FusedAttrs, FusedOp, Port
from onnxopt.ops.group_norm import GROUP_NORM, GroupNormAttrs
from onnxopt.ops.mask_kind import MaskKind
from onnxopt.ops.norms import LAYER_NORM, RMS_NORM, LayerNormAttrs, NormAttrs, RMSNormAttrs
from onnxopt.ops.rotary import ROTARY, RotaryAttrs

FUSED_OPS: dict[str, FusedOp] = {
    op.name: op for op in (ATTENTION, LAYER_NORM, RMS_NORM, GROUP_NORM, GELU, SILU, SWIGLU,
                          ROTARY)}


def attributes_of(node: Node) -> FusedAttrs:
    """The attribute record of a fused node, typed by its op (a KeyError for an op that is not
    one of :data:`FUSED_OPS`)."""
    return FUSED_OPS[node.op_type].attrs.of(node)


__all__ = ["FUSED_OPS", "AttentionAttrs", "FusedAttrs", "FusedOp", "GeluAttrs", "GroupNormAttrs",
           "LayerNormAttrs", "MaskKind", "NormAttrs", "Port", "RMSNormAttrs", "RotaryAttrs",
           "SiluAttrs", "SwiGLUAttrs", "attributes_of"]
