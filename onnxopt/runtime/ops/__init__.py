"""The custom ops of domain ``ai.onnxopt.cuda``: onnxopt's own kernels inside ORT.

Stage 6 (``onnxopt.select.pycuda_kernels``) binds fused ops to these; ``libonnxopt_ops``
(``onnxopt/runtime/_native``) implements them, each for the CUDA provider (the kernel on ORT's
stream) and the CPU provider (its host implementation), in float16, bfloat16 and float32.

| op | inputs | outputs | attributes |
|---|---|---|---|
| FlashAttention | Q, K, V, bias?, kv_start?, kv_end?, causal_offset? | O | scale, causal, window |
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

from onnxopt.runtime.cuda import DOMAIN, OPSET

OPS = ("FlashAttention", "LayerNorm", "RMSNorm", "GroupNorm", "BiasGelu", "SwiGLU")
DTYPES = ("float16", "bfloat16", "float32")

__all__ = ["DOMAIN", "DTYPES", "OPS", "OPSET"]
