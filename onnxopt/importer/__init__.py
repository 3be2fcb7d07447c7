"""Stage 1: ONNX → semantic IR."""

from onnxopt.importer.build import import_model

__all__ = ["import_model"]
