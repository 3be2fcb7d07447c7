"""onnxopt's ONNX Runtime bridge: declare Python kernels, get sessions that run them.

from onnxopt.runtime import cpu_kernel, session

@cpu_kernel("ai.onnxopt", "ScaledAdd", inputs=["a: float32", "b: float32"],
            outputs=["y: float32"], attrs={"alpha": float})
def scaled_add(a, b, *, alpha=1.0):
    return a + alpha * b

outputs = session("model.onnx").run(None, {"a": a, "b": b})
"""

from . import ops  # noqa: F401 - declares the ai.onnxopt.cuda ops (CPU + CUDA kernels)
from .compute import KernelContext
from .errors import RuntimeUnavailable
from .registry import REGISTRY, KernelRegistry, KernelSpec, Port, cpu_kernel, cuda_kernel
from .session import session, used_ops
from .tensors import DeviceTensor

__all__ = [
    "REGISTRY",
    "DeviceTensor",
    "KernelContext",
    "KernelRegistry",
    "KernelSpec",
    "Port",
    "RuntimeUnavailable",
    "cpu_kernel",
    "cuda_kernel",
    "session",
    "used_ops",
]
