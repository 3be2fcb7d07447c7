"""Builds onnxopt's one native piece: the ONNX Runtime custom-op shim.

Everything else lives in pyproject.toml. The shim is plain C with no Python or
ORT headers; it is built as an extension only so that `pip install` compiles it
with the system C compiler (the EXT_SUFFIX in its file name is harmless: it is
loaded with ctypes, never imported). `optional=True` lets installation succeed
without a compiler; onnxopt/runtime/native.py then explains what is missing.
The source's hash is compiled in, so that an edited shim.c in an editable
install is noticed and rebuilt instead of silently using the stale library.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SHIM = "onnxopt/runtime/_native/shim.c"
SHIM_HASH = hashlib.sha256((Path(__file__).parent / SHIM).read_bytes()).hexdigest()[:16]

setup(
    ext_modules=[
        Extension(
            "onnxopt.runtime._native.libonnxopt_shim",
            sources=[SHIM],
            define_macros=[("ONNXOPT_SHIM_SOURCE_HASH", f'"{SHIM_HASH}"')],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
