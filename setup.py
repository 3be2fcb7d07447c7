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
import importlib.util
import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

SHIM = "onnxopt/runtime/_native/shim.c"
SHIM_HASH = hashlib.sha256((Path(__file__).parent / SHIM).read_bytes()).hexdigest()[:16]

KERNELS = Path(__file__).parent / "kernels"
KERNEL_FILES = ("*.cu", "*.cuh", "*.json", "*.md")


class BuildPyWithKernels(build_py):
    """Copy the top-level kernels/ (CUDA sources and their declarations) into the built package
    as onnxopt/kernels, where onnxopt.runtime.cuda.metadata looks for them when installed, and
    build the kernel images into onnxopt/kernels/bin (SASS for sm_80/86/89/90 and PTX for
    newer GPUs) when nvcc is found, so the serving host needs no CUDA toolkit. Without nvcc
    (or with ONNXOPT_BUILD_KERNELS=0) the wheel carries the sources only and the kernels
    compile through PyCUDA on first use. An editable install reads the repository's kernels/
    directly (``onnxopt kernels --build`` builds its images)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False) or not KERNELS.is_dir():
            return
        target = Path(self.build_lib) / "onnxopt" / "kernels"
        target.mkdir(parents=True, exist_ok=True)
        for pattern in KERNEL_FILES:
            for path in KERNELS.glob(pattern):
                shutil.copy2(path, target / path.name)
        prebuilt = KERNELS / "bin"
        if (prebuilt / "manifest.json").is_file():  # an sdist built with its images
            shutil.copytree(prebuilt, target / "bin", dirs_exist_ok=True)
            return
        if os.environ.get("ONNXOPT_BUILD_KERNELS", "1") == "0":
            return
        compiler = _load_compiler()
        if compiler.find_nvcc() is None:
            print("onnxopt: nvcc not found; the wheel carries no kernel images "
                  "(the CUDA kernels compile through PyCUDA on first use)", file=sys.stderr)
            return
        images = compiler.build_images(target, target / "bin")
        print(f"onnxopt: built {len(images)} CUDA kernel images", file=sys.stderr)


def _load_compiler():
    """onnxopt/runtime/cuda/compiler.py by path: it imports only the standard library, and
    onnxopt's dependencies are not installed in an isolated build environment."""
    path = Path(__file__).parent / "onnxopt" / "runtime" / "cuda" / "compiler.py"
    spec = importlib.util.spec_from_file_location("_onnxopt_kernel_compiler", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while it executes
    spec.loader.exec_module(module)
    return module


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
