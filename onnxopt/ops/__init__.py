"""Fused operators in domain ai.onnxopt: schema, decomposition, NumPy reference.

``FUSED_OPS`` is the one table of them, by name: the builder checks new fused nodes
against it, selection finds each op's decomposition in it.
"""

from onnxopt.ops.activations import GELU, SILU, SWIGLU
from onnxopt.ops.attention import ATTENTION
from onnxopt.ops.base import FusedOp
from onnxopt.ops.group_norm import GROUP_NORM
from onnxopt.ops.norms import LAYER_NORM, RMS_NORM
from onnxopt.ops.rotary import ROTARY

FUSED_OPS: dict[str, FusedOp] = {
    op.name: op for op in (ATTENTION, LAYER_NORM, RMS_NORM, GROUP_NORM, GELU, SILU, SWIGLU,
                          ROTARY)}

__all__ = ["FUSED_OPS", "FusedOp"]
