"""The custom ops of domain ``ai.onnxopt.cuda``: onnxopt's own CUDA kernels inside ORT.

Stage 6 (``onnxopt.select.pycuda_kernels``) binds fused ops to these; importing this package
declares them in ``onnxopt.runtime.REGISTRY`` (``onnxopt.runtime`` does so on import), each
with a CPU kernel (the NumPy reference) and a CUDA kernel per dtype.

| op | inputs | outputs | attributes |
|---|---|---|---|
| FlashAttention | Q, K, V, bias?, kv_start?, kv_end?, causal_offset? | O | scale, causal |
| LayerNorm | X, gamma?, beta?, residual? | Y, S? | epsilon |
| RMSNorm | X, gamma?, residual? | Y, S? | epsilon |
| GroupNorm | X, gamma?, beta? | Y | groups, epsilon, activation |
| BiasGelu | X, bias? | Y | approximate |
| SwiGLU | gate, up | Y | - |

Ports and attributes come from the kernels' declarations (``kernels/*.json``). No node names a
specialisation or a tile: those are chosen at run time from the device, so a model optimized
on one GPU runs on any other.
"""

from __future__ import annotations

from . import activations, attention, norms  # noqa: F401 - each declares its ops
from ._common import DOMAIN, DTYPES, OPSET

OPS = ("FlashAttention", "LayerNorm", "RMSNorm", "GroupNorm", "BiasGelu", "SwiGLU")

__all__ = ["DOMAIN", "DTYPES", "OPS", "OPSET"]
