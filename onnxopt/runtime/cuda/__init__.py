"""The project's own CUDA kernels (``kernels/*.cu``): shipped images, loading, launch wrappers.

Launch wrappers take device pointers (ints), shapes and a stream handle (int), so they work with
memory from ONNX Runtime, PyTorch, CuPy or PyCUDA alike. Importing this package needs neither a
GPU nor PyCUDA (``pycuda_backend`` imports it on first use); the driver library is opened on the
first launch. ``reference`` holds the NumPy definitions of every kernel's semantics, ``devices``
the one table of device limits, ``probe`` the one device probe.
"""

DOMAIN = "ai.onnxopt.cuda"  # the ONNX domain of the custom ops that run these kernels
OPSET = 1


from .activations import bias_gelu, swiglu, swiglu_fused
from .attention import flash_attention
from .driver import CudaError, CudaUnavailable, available
from .loader import KernelUnsupported, preload
from .norms import group_norm, layer_norm, rms_norm

__all__ = [
    "DOMAIN",
    "OPSET",
    "CudaError",
    "CudaUnavailable",
    "KernelUnsupported",
    "available",
    "bias_gelu",
    "flash_attention",
    "group_norm",
    "layer_norm",
    "preload",
    "rms_norm",
    "swiglu",
    "swiglu_fused",
]
