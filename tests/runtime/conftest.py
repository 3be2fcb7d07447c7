"""Fixtures for the runtime bridge tests: a private kernel registry and ONNX-text models.

Fixtures rather than an importable helper module, so the tests do not depend
on pytest's import mode or on other folders' conftest files.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
import onnx.parser
import pytest

from onnxopt.runtime import KernelRegistry

DOMAIN = "ai.onnxopt.test"


@pytest.fixture
def registry() -> KernelRegistry:
    """A registry of the test's own kernels, so tests never see each other's declarations."""
    return KernelRegistry()


def _model(graph: str, opset: int = 21) -> onnx.ModelProto:
    header = f'< ir_version: 10, opset_import: ["" : {opset}, "{DOMAIN}" : 1] >\n'
    proto = onnx.parser.parse_model(header + graph)
    proto.ir_version = 10  # onnx 1.23 defaults to 14, which ORT 1.31 rejects
    return proto


@pytest.fixture
def model() -> Callable[..., onnx.ModelProto]:
    """Parse a graph written in ONNX text, with the test domain imported."""
    return _model
