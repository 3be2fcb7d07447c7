"""Where ``libonnxopt_ops`` is, and registering it on an ``onnxruntime.SessionOptions``.

The library is onnxopt's kernels as ONNX Runtime custom ops, in C (``_native/``): any ORT binding
loads it with ``register_custom_ops_library(path)``, and nothing in the inference path is
Python. This module only finds it: ``pip install`` builds it into ``onnxopt/runtime/_native/``
(setup.py); a source checkout that was never built gets it compiled on first use into a cache
folder, under the hash of its sources. A built library reports the hash it was built from
(``onnxopt_ops_source_hash``), so one older than the sources beside it is passed over, not
used.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

from .ort_module import ort

NATIVE_DIR = Path(__file__).with_name("_native")
# Session config entry read by RegisterCustomOps: what the CPU provider's ops run.
CPU_KERNELS_KEY = "onnxopt.cpu_kernels"

_lock = threading.Lock()


class LibraryUnavailable(RuntimeError):
    """The library is neither installed nor buildable here (no C compiler, or it failed)."""


@functools.cache
def _build_module() -> ModuleType | None:
    """``_native/build.py`` (loaded by path: it is setup.py's too), or None without sources."""
    path = NATIVE_DIR / "build.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("onnxopt_runtime_native_build", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _filename() -> str:
    return "libonnxopt_ops" + (".dylib" if sys.platform == "darwin" else ".so")


def built_from(path: str | os.PathLike) -> str | None:
    """The source hash the library at ``path`` was built from (it is loaded to ask)."""
    lib = ctypes.CDLL(os.fspath(path))
    getter = getattr(lib, "onnxopt_ops_source_hash", None)
    if getter is None:
        return None
    getter.restype = ctypes.c_char_p
    return getter().decode("ascii")


def expected_hash() -> str | None:
    """What a library built from the sources here reports; None where they are not shipped."""
    build = _build_module()
    if build is None:
        return None
    try:
        return build.source_hash()
    except FileNotFoundError:  # an installed wheel: kernels/ is not beside the sources
        return None


def cache_dir() -> Path:
    """Where builds of a source checkout go: $XDG_CACHE_HOME/onnxopt, else ~/.cache/onnxopt."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onnxopt"


@functools.cache
def path() -> str:
    """The path of ``libonnxopt_ops`` to give ``register_custom_ops_library``; built on first
    use where it is missing or stale (raises LibraryUnavailable where it cannot be)."""
    with _lock:
        expected = expected_hash()
        installed = NATIVE_DIR / _filename()
        if installed.is_file() and (expected is None or built_from(installed) == expected):
            return str(installed)
        build = _build_module()
        if build is None or expected is None:
            raise LibraryUnavailable(
                f"libonnxopt_ops is not installed ({installed} is missing) and its sources "
                "are not here to build it; reinstall onnxopt")
        target = cache_dir() / f"libonnxopt_ops-{expected}" / _filename()
        if not target.is_file():
            try:
                build.build(target)
            except RuntimeError as error:
                raise LibraryUnavailable(str(error)) from None
        return str(target)


def register(options: ort.SessionOptions, *, staged: bool = False) -> None:
    """Register the ``ai.onnxopt.cuda`` ops on ``options``. ``staged``: the CPU provider's ops
    run the CUDA kernels through device memory (a GPU with a CPU-only ONNX Runtime) instead of
    their host implementations."""
    options.add_session_config_entry(CPU_KERNELS_KEY, "staged" if staged else "host")
    options.register_custom_ops_library(path())
