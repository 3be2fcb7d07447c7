"""Numerical verification: run two models in ONNX Runtime on the same inputs, one at a time."""

from onnxopt.verification.compare import (
    NotVerified,
    OutputDiff,
    VerifyReport,
    verify_isolated,
    verify_models,
)
from onnxopt.verification.inputs import make_inputs

__all__ = ["NotVerified", "OutputDiff", "VerifyReport", "make_inputs", "verify_isolated",
           "verify_models"]
