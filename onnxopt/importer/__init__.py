"""Stage 1: ONNX → semantic IR."""

from onnxopt.importer.build import import_model
from onnxopt.importer.semantics import annotate

__all__ = ["annotate", "import_model"]
