"""ONNX Runtime's Python module, loaded when first used rather than when onnxopt starts.

Loading it takes 35-40 ms, about 2 % of optimizing a 24-layer GPT-2 from the command line,
and every command would pay it before reading its arguments. Here it is bound lazily
(:class:`importlib.util.LazyLoader`): ``ort`` is the module, whose code runs on the first
attribute read. ``optimize`` never reads it in its own process: the ORT helper loads ORT
and answers the stages' questions (:mod:`onnxopt.ort_helper`).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def _lazily(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return importlib.import_module(name)  # fails as a plain import would, with its message
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ort = _lazily("onnxruntime")

