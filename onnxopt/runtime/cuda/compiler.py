"""nvcc -> cubin, one template specialisation at a time, cached on disk.

The cache key is the sha256 of the source and every local header it includes, the target
architecture (sm_80, sm_90, ... from the device's compute capability), the specialisation
defines, the nvcc flags and nvcc's version, so a stale cubin is never loaded. Files are written
atomically (temp file + rename), so concurrent processes may share the cache.

Needs only nvcc: no GPU, no driver. The CI tests use this to build every specialisation.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

NVCC_FLAGS = ("-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v")

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


class CompileError(RuntimeError):
    """nvcc failed; the message carries its command line and output."""


@dataclass(frozen=True)
class Compiled:
    cubin: Path
    log: str  # nvcc / ptxas output (ptxas -v resource usage)
    cached: bool


@dataclass(frozen=True)
class Resources:
    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    static_smem: int


def cache_dir() -> Path:
    """$ONNXOPT_CACHE_DIR, else $XDG_CACHE_HOME/onnxopt/cubin, else ~/.cache/onnxopt/cubin."""
    env = os.environ.get("ONNXOPT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onnxopt" / "cubin"


def arch_for(compute_capability: tuple[int, int]) -> str:
    """(9, 0) -> "sm_90". Plain sm_XY (not sm_90a): the kernels use no arch-specific features."""
    major, minor = compute_capability
    return f"sm_{major}{minor}"


def find_nvcc() -> str | None:
    """$ONNXOPT_NVCC, nvcc on PATH, $CUDA_HOME/bin/nvcc or /usr/local/cuda/bin/nvcc."""
    env = os.environ.get("ONNXOPT_NVCC")
    if env:
        return env
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return None


@functools.cache
def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def source_digest(source: Path) -> str:
    """sha256 over the source and, recursively, the local headers it includes."""
    h = hashlib.sha256()
    seen: set[Path] = set()

    def add(path: Path) -> None:
        path = path.resolve()
        if path in seen:
            return
        seen.add(path)
        text = path.read_bytes()
        h.update(path.name.encode() + b"\0" + text + b"\0")
        for inc in _INCLUDE.findall(text.decode("utf-8", errors="replace")):
            candidate = path.parent / inc
            if candidate.is_file():
                add(candidate)

    add(source)
    return h.hexdigest()


def spec_define(entry: str) -> str:
    """The define that instantiates one entry point of a kernel source."""
    return f"ONNXOPT_SPEC_{entry}"


def compile_cubin(
    source: Path,
    arch: str,
    defines: tuple[str, ...] = (),
    *,
    nvcc: str | None = None,
    cache: Path | None = None,
    extra_flags: tuple[str, ...] = (),
) -> Compiled:
    """Compile ``source`` for ``arch`` with ``-D`` ``defines`` to a cubin in the cache."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CompileError("nvcc not found: install the CUDA toolkit or set ONNXOPT_NVCC")
    source = Path(source)
    flags = (*NVCC_FLAGS, *extra_flags)
    key_parts = [
        source_digest(source),
        arch,
        "\n".join(sorted(defines)),
        "\n".join(flags),
        nvcc_version(nvcc),
    ]
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()
    cache = cache or cache_dir()
    tag = "-".join(d.removeprefix("ONNXOPT_SPEC_") for d in sorted(defines))[:80] or "all"
    out = cache / f"{source.stem}-{tag}-{arch}-{key[:20]}.cubin"
    log_path = out.with_suffix(".log")
    if out.is_file() and log_path.is_file():
        return Compiled(out, log_path.read_text(), cached=True)

    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        tmp_out = Path(tmp) / "out.cubin"
        cmd = [
            nvcc,
            "-cubin",
            f"-arch={arch}",
            *flags,
            *(f"-D{d}" for d in defines),
            "-I",
            str(source.parent),
            "-o",
            str(tmp_out),
            str(source),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0 or not tmp_out.is_file():
            raise CompileError(f"nvcc failed ({proc.returncode}): {' '.join(cmd)}\n{log}")
        tmp_log = Path(tmp) / "out.log"
        tmp_log.write_text(log)
        os.replace(tmp_log, log_path)
        os.replace(tmp_out, out)
    return Compiled(out, log, cached=False)


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")
_PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Per entry point: registers, spills, stack and static shared memory from ``ptxas -v``."""
    result: dict[str, Resources] = {}
    entry = None
    frame = (0, 0, 0)
    for line in log.splitlines():
        m = _PTXAS_ENTRY.search(line)
        if m:
            entry, frame = m.group(1), (0, 0, 0)
            continue
        if entry is None:
            continue
        m = _PTXAS_FRAME.search(line)
        if m:
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            continue
        m = _PTXAS_USED.search(line)
        if m:
            result[entry] = Resources(
                registers=int(m.group(1)),
                spill_stores=frame[1],
                spill_loads=frame[2],
                stack_bytes=frame[0],
                static_smem=int(m.group(2) or 0),
            )
            entry = None
    return result
