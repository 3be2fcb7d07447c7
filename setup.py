"""Builds onnxopt's native piece, libonnxopt_ops (the kernels as ONNX Runtime custom ops), and
copies the CUDA kernels into the wheel.

Everything else lives in pyproject.toml. The library is plain C (no Python, ORT or CUDA
headers); it is built as an extension only so that `pip install` compiles it with the system C
compiler, under its own name (``libonnxopt_ops.so``: users register it by path, so it carries
no Python tag) and without linking Python. First its header is generated from
``kernels/*.json`` (``onnxopt/runtime/_native/build.py``), so the C argument packing is the
Python side's. `optional=True` lets installation succeed without a compiler;
onnxopt.runtime.library then builds it on first use or says what is missing. The hash of its
sources is compiled in, so that an edited source in an editable install is noticed and rebuilt
instead of silently using the stale library.
"""

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

NATIVE = "onnxopt/runtime/_native"
LIBRARY = "onnxopt.runtime._native.libonnxopt_ops"
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


def _load(name: str, path: Path):
    """A module of onnxopt by path: it imports only the standard library, and onnxopt's
    dependencies are not installed in an isolated build environment."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while it executes
    spec.loader.exec_module(module)
    return module


def _load_compiler():
    return _load("_onnxopt_kernel_compiler", Path("onnxopt/runtime/cuda/compiler.py"))


class BuildNativeLibrary(build_ext):
    """libonnxopt_ops: generate its header, compile it with the flags build.py states, name it
    libonnxopt_ops.so."""

    def build_extension(self, ext):
        if ext.name != LIBRARY:
            return super().build_extension(ext)
        native = _load("_onnxopt_native_build", Path(NATIVE) / "build.py")
        generated = Path(self.build_temp) / "onnxopt_ops_generated"
        native.write_header(generated)
        ext.include_dirs = [str(generated), NATIVE]
        ext.define_macros = [("ONNXOPT_OPS_SOURCE_HASH", f'"{native.source_hash()}"')]
        ext.extra_compile_args = [f for f in native.CFLAGS if f != "-fPIC"]
        ext.libraries = [flag.removeprefix("-l") for flag in native.LIBS]
        return super().build_extension(ext)

    def get_ext_filename(self, fullname):
        # distutils asks with the full dotted name or with its last part only
        if fullname.split(".")[-1] != LIBRARY.split(".")[-1]:
            return super().get_ext_filename(fullname)
        suffix = ".dylib" if sys.platform == "darwin" else ".so"
        return os.path.join(*fullname.split(".")) + suffix

    def get_export_symbols(self, ext):
        return ["RegisterCustomOps"] if ext.name == LIBRARY else super().get_export_symbols(ext)


setup(
    cmdclass={"build_py": BuildPyWithKernels, "build_ext": BuildNativeLibrary},
    ext_modules=[
        Extension(
            LIBRARY,
            sources=[f"{NATIVE}/{name}" for name in
                     ("ops_main.c", "ops_plan.c", "ops_host.c", "ops_cuda.c")],
            optional=True,
        )
    ]
)
