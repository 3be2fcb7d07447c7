"""Export: semantic IR → ONNX, and writing it to disk atomically."""

from onnxopt.exporter.build import export_model, export_model_lazy
from onnxopt.exporter.save import save_model

__all__ = ["export_model", "export_model_lazy", "save_model"]
