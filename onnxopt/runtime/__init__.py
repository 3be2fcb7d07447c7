"""onnxopt's kernels in ONNX Runtime: the native custom-op library and sessions that use it.

from onnxopt.runtime import library, session

path = library.path()        # libonnxopt_ops: register_custom_ops_library(path), any binding
outputs = session("model.opt.onnx").run(None, feeds)   # the same, from Python

``cuda/`` holds the CUDA side (kernel metadata, images, the device probe, PyCUDA for compiling
and for the GPU tests' memory); ``_native/`` the library's C sources.
"""

from . import library
from .errors import RuntimeUnavailable
from .session import session, used_ops

__all__ = ["RuntimeUnavailable", "library", "session", "used_ops"]
