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
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

SHIM = "onnxopt/runtime/_native/shim.c"
SHIM_HASH = hashlib.sha256((Path(__file__).parent / SHIM).read_bytes()).hexdigest()[:16]

KERNELS = Path(__file__).parent / "kernels"
KERNEL_FILES = ("*.cu", "*.cuh", "*.json", "*.md")


class BuildPyWithKernels(build_py):
    """Copy the top-level kernels/ (CUDA sources and launch metadata) into the built package
    as onnxopt/kernels, where onnxopt.runtime.cuda.metadata looks for them when installed.
    An editable install reads the repository's kernels/ directly."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False) or not KERNELS.is_dir():
            return
        target = Path(self.build_lib) / "onnxopt" / "kernels"
        target.mkdir(parents=True, exist_ok=True)
        for pattern in KERNEL_FILES:
            for path in KERNELS.glob(pattern):
                shutil.copy2(path, target / path.name)


setup(
    cmdclass={"build_py": BuildPyWithKernels},
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
