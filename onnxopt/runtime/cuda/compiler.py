"""nvcc at build time: the shipped kernel images, and single specialisations for the tests.

Two uses, both without a GPU or a driver (which is why this runs nvcc as a subprocess rather
than through PyCUDA, whose compiler module cannot be imported without libcuda):

- ``build_images``: every kernel family for every shipped target (SASS for sm_80, sm_86,
  sm_89 and sm_90, plus PTX for compute_90 that the driver compiles for newer GPUs), written
  beside a manifest; run by ``setup.py`` when the wheel is built and by ``onnxopt kernels
  --build``. The runtime loads these images and needs no toolkit.
- ``compile_cubin``: one specialisation for one architecture, cached, as the tests build them.

This module imports only the standard library: ``setup.py`` loads it by path in its isolated
build environment, where onnxopt's dependencies are not installed.

The cache key is the sha256 of the source and every local header it includes, the target
architecture (sm_80, sm_90, ... from the device's compute capability), the specialisation
defines, the nvcc flags and nvcc's version, so a stale cubin is never loaded. Files are written
atomically (temp file + rename), so concurrent processes may share the cache.

Needs only nvcc: no GPU, no driver. The CI tests use this to build every specialisation.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
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
    import hashlib  # here, as below: every start imports this module, few of them compile

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
    import hashlib

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


# --- the shipped images ----------------------------------------------------------------------

# SASS for every generation we tune for, and PTX of the newest for what comes after (the driver
# JIT-compiles it once per device and caches the result).
SASS_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")
PTX_ARCH = "compute_90"
TARGETS = (*SASS_ARCHS, PTX_ARCH)
MANIFEST = "manifest.json"


def image_name(family: str, target: str) -> str:
    """``flash_attention.sm_86.cubin`` / ``flash_attention.compute_90.ptx``."""
    return f"{family}.{target}.{'ptx' if target.startswith('compute_') else 'cubin'}"


@dataclass(frozen=True)
class Image:
    family: str
    target: str
    path: Path
    seconds: float
    resources: dict[str, Resources]  # per entry point (empty for PTX: ptxas does not run)


def compile_image(source: Path, target: str, out: Path, *, nvcc: str | None = None,
                  defines: tuple[str, ...] = ("ONNXOPT_SPEC_ALL",)) -> Image:
    """Every entry point of ``source`` for one target: a cubin for ``sm_XY``, PTX for
    ``compute_XY``. Written atomically to ``out``."""

    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CompileError("nvcc not found: install the CUDA toolkit or set ONNXOPT_NVCC")
    source = Path(source)
    ptx = target.startswith("compute_")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    cmd = [nvcc, "-ptx" if ptx else "-cubin", f"-arch={target}", *NVCC_FLAGS,
           *(f"-D{d}" for d in defines), "-I", str(source.parent), "-o", str(tmp), str(source)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise CompileError(f"nvcc failed ({proc.returncode}): {' '.join(cmd)}\n{log}")
    os.replace(tmp, out)
    return Image(source.stem, target, out, seconds, parse_ptxas(log))


def build_images(kernels: Path, out: Path, *, targets: tuple[str, ...] = TARGETS,
                 families: tuple[str, ...] | None = None, jobs: int | None = None,
                 nvcc: str | None = None) -> list[Image]:
    """Build every family (``kernels/*.cu``) for every target into ``out``, ``jobs`` nvcc
    processes at a time, and write the manifest the loader checks: the source digest each
    image was built from (a stale image is never loaded), nvcc's version, and per target and
    entry point the registers, spills and static shared memory ptxas reported."""

    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CompileError("nvcc not found: install the CUDA toolkit or set ONNXOPT_NVCC")
    kernels, out = Path(kernels), Path(out)
    sources = sorted(kernels.glob("*.cu"))
    if families is not None:
        sources = [s for s in sources if s.stem in families]
    work = [(s, t) for s in sources for t in targets]
    jobs = max(1, jobs or os.cpu_count() or 1)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each job is an nvcc process
        images = list(pool.map(
            lambda st: compile_image(st[0], st[1], out / image_name(st[0].stem, st[1]),
                                     nvcc=nvcc), work))
    manifest_path = out / MANIFEST
    manifest = {}
    if manifest_path.is_file():  # a partial rebuild keeps the other families' entries
        manifest = json.loads(manifest_path.read_text())
    manifest.setdefault("families", {})
    manifest["nvcc"] = nvcc_version(nvcc).splitlines()[-1] if nvcc_version(nvcc) else ""
    for source in sources:
        entry = manifest["families"].setdefault(source.stem, {})
        entry["source_digest"] = source_digest(source)
        entry.setdefault("targets", {})
        for image in images:
            if image.family == source.stem:
                entry["targets"][image.target] = {
                    "file": image.path.name,
                    "seconds": round(image.seconds, 2),
                    "resources": {e: r.__dict__ for e, r in sorted(image.resources.items())},
                }
    tmp = manifest_path.with_name(f".{MANIFEST}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, manifest_path)
    return images


def main(argv: list[str] | None = None) -> int:
    """``python compiler.py KERNELS_DIR OUT_DIR [JOBS]``: what setup.py runs."""

    args = sys.argv[1:] if argv is None else argv
    jobs = int(args[2]) if len(args) > 2 else None
    images = build_images(Path(args[0]), Path(args[1]), jobs=jobs)
    print(f"built {len(images)} kernel images into {args[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
