"""Numerical verification: run two models in ONNX Runtime on the same random inputs."""

from onnxopt.verification.compare import OutputDiff, VerifyReport, verify_isolated, verify_models
from onnxopt.verification.inputs import make_inputs

__all__ = ["OutputDiff", "VerifyReport", "make_inputs", "verify_isolated", "verify_models"]
