"""onnxopt: a small AI compiler for ONNX models.

The public Python API lives in :mod:`onnxopt.api` and is re-exported here, so
``onnxopt.optimize(path)`` and ``onnxopt.verify(a, b)`` work after a bare
``import onnxopt``. Heavy modules (onnxruntime, the rules) load lazily.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["OnnxoptError", "__version__", "bisect", "explain", "optimize", "verify"]


def __getattr__(name: str):
    if name in ("optimize", "verify", "explain", "bisect"):
        from onnxopt import api

        return getattr(api, name)
    if name == "OnnxoptError":
        from onnxopt.errors import OnnxoptError

        return OnnxoptError
    raise AttributeError(f"module 'onnxopt' has no attribute {name!r}")
