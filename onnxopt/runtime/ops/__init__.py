"""The custom ops of domain ``ai.onnxopt.cuda``: onnxopt's own CUDA kernels inside ORT.

Stage 6 (``onnxopt.select.pycuda_kernels``) binds fused ops to these; importing this package
declares them in ``onnxopt.runtime.REGISTRY`` (``onnxopt.runtime`` does so on import), each
with a CPU kernel (the NumPy reference) and a CUDA kernel per dtype.

| op | inputs | outputs | attributes |
|---|---|---|---|
| FlashAttention | Q, K, V, kv_lens?, key_padding_mask? | O | kernel, tile_m, tile_n, warps, scale, causal |
| LayerNorm | X, gamma?, beta?, residual? | Y, S? | epsilon, kernel |
| RMSNorm | X, gamma?, residual? | Y, S? | epsilon, kernel |
| BiasGelu | X, bias? | Y | approximate, kernel |
| SwiGLU | gate, up | Y | kernel |
"""

from __future__ import annotations

import onnx

from . import activations, attention, norms  # noqa: F401 - each declares its ops
from ._common import DOMAIN, DTYPES, OPSET, right_padded_lengths

OPS = ("FlashAttention", "LayerNorm", "RMSNorm", "BiasGelu", "SwiGLU")


def drop_padding_checks(model: onnx.ModelProto) -> int:
    """Remove the ``key_padding_mask`` input of every FlashAttention node (in place).

    That input is read from host memory to check right padding on every call; without it
    every input stays on the device (CUDA-graph capture with device-bound inputs), and a
    left-padded mask silently computes with the lengths. Returns how many nodes changed.
    """
    changed = 0
    for node in model.graph.node:
        if node.domain == DOMAIN and node.op_type == "FlashAttention" and len(node.input) > 4:
            del node.input[4:]
            changed += 1
    return changed


__all__ = ["DOMAIN", "DTYPES", "OPS", "OPSET", "drop_padding_checks", "right_padded_lengths"]
