"""The always-legal kernel: a fused op's own decomposition into standard ONNX ops."""

from __future__ import annotations

from onnxopt.ops.base import all_fused_ops
from onnxopt.select.kernel import Kernel


def _emit(op_name: str):
    def emit(b, node, target):
        from onnxopt.ops.base import fused_op

        return fused_op(op_name).decompose(b, node)
    return emit


def decomposition_kernels() -> list[Kernel]:
    return [
        Kernel(name=f"decompose.{name}", implements=name, backend="decompose", emit=_emit(name),
               dtypes=frozenset({"float32", "float16", "bfloat16", "float64"}), cost=100.0,
               notes="standard ONNX ops; always legal")
        for name in sorted(all_fused_ops())
    ]
