"""Find, or build on first use, the native shim and load it once per process.

`pip install` compiles shim.c into onnxopt/runtime/_native/ (see setup.py). A source
checkout that was never installed has no such library, so the first call compiles
it with the system C compiler into a cache folder, under a name keyed by the
source's hash. Both builds carry that hash (`onnxopt_shim_source_hash()`), so an
installed library older than the shim.c beside it is passed over, not used.

The library is loaded with ctypes *before* ORT sees its path: dlopen returns the
same handle for the same path, so the callback installed here is the one ORT's
`RegisterCustomOps` call finds.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

_NATIVE_DIR = Path(__file__).with_name("_native")
_SOURCE = _NATIVE_DIR / "shim.c"
_BUILT_PREFIX = "libonnxopt_shim"

_lock = threading.Lock()
_loaded: Shim | None = None


class ShimBuildError(RuntimeError):
    """The shim is neither installed nor buildable here (no C compiler, or it failed)."""


@dataclass(frozen=True)
class Shim:
    """The loaded shim: its path (for ORT) and its ctypes handle (for us)."""

    path: str
    lib: ctypes.CDLL


def cache_dir() -> Path:
    """Where fallback builds go: $XDG_CACHE_HOME/onnxopt, else ~/.cache/onnxopt."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onnxopt"


def _installed_library() -> Path | None:
    """The library built by setup.py, whatever suffix the build gave it."""
    for candidate in sorted(_NATIVE_DIR.glob(_BUILT_PREFIX + "*")):
        if candidate.suffix in (".so", ".dylib", ".pyd", ".dll"):
            return candidate
    return None


def source_hash() -> str | None:
    """What a build of the shim.c shipped here reports; None if the source is absent."""
    if not _SOURCE.exists():
        return None
    return hashlib.sha256(_SOURCE.read_bytes()).hexdigest()[:16]


def _built_from(lib: ctypes.CDLL) -> str | None:
    try:
        getter = lib.onnxopt_shim_source_hash
    except AttributeError:
        return None
    getter.restype = ctypes.c_char_p
    return getter().decode("ascii")


def _compile_into_cache() -> Path:
    digest = source_hash()
    if digest is None:
        raise ShimBuildError(
            f"onnxopt's runtime shim is not installed and its source {_SOURCE} is missing"
        )
    target = cache_dir() / f"{_BUILT_PREFIX}-{digest}.so"
    if target.exists():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ShimBuildError(
            "onnxopt's runtime shim is not installed and no C compiler (cc) was found to build it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build under a temporary name and rename, so that concurrent processes never
    # load a half-written library.
    fd, tmp = tempfile.mkstemp(prefix=target.name, suffix=".tmp", dir=target.parent)
    os.close(fd)
    cmd = [
        compiler,
        "-shared",
        "-fPIC",
        "-O2",
        f'-DONNXOPT_SHIM_SOURCE_HASH="{digest}"',
        str(_SOURCE),
        "-o",
        tmp,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        os.unlink(tmp)
        raise ShimBuildError(f"building the runtime shim failed: {' '.join(cmd)}\n{result.stderr}")
    os.replace(tmp, target)
    return target


def load() -> Shim:
    """The process-wide shim, loaded on first call (compiling it if need be)."""
    global _loaded
    with _lock:
        if _loaded is None:
            path, lib = _installed_library(), None
            if path is not None:
                lib = ctypes.CDLL(str(path))
                expected = source_hash()
                if expected is not None and _built_from(lib) != expected:
                    lib = None  # stale: built from an older shim.c (editable install)
            if lib is None:
                path = _compile_into_cache()
                lib = ctypes.CDLL(str(path))
            lib.onnxopt_set_register_callback.argtypes = [ctypes.c_void_p]
            lib.onnxopt_set_register_callback.restype = None
            _loaded = Shim(str(path), lib)
        return _loaded
