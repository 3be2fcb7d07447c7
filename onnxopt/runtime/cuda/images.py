"""The shipped kernel images: which one a device loads, and whether it is current.

The wheel carries every kernel family compiled for sm_80, sm_86, sm_89 and sm_90 (SASS) and
compute_90 (PTX), built by ``compiler.build_images`` when the package is built or by
``onnxopt kernels --build``, with a manifest of the source digest each was built from. A
device loads, in this order of preference:

1. SASS for its own architecture (sm_86 on an 8.6 part);
2. SASS for the nearest lower minor of its major (an 8.7 part runs sm_86 code: SASS is
   forward-compatible within a major version, never across);
3. the newest PTX not newer than the device (a 10.0 or 12.0 part JIT-compiles compute_90);
4. nothing: the loader compiles the family for ``sm_XY`` through PyCUDA (needs nvcc).

``choose`` is a pure function of the capability and the targets present (unit-tested with
capabilities faked); ``find`` adds the files and the staleness check: an image whose source
digest differs from the source beside it is never loaded.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from . import compiler, metadata


def image_dir() -> Path:
    """$ONNXOPT_KERNEL_IMAGES, else ``bin/`` beside the kernel sources."""
    env = os.environ.get("ONNXOPT_KERNEL_IMAGES")
    return Path(env) if env else metadata.kernels_dir() / "bin"


def _version(target: str) -> tuple[int, int]:
    digits = target.split("_", 1)[1]
    return int(digits[:-1]), int(digits[-1])


def choose(cc: tuple[int, int], targets: tuple[str, ...] | list[str]) -> str | None:
    """The target a device of capability ``cc`` should load among ``targets`` (``sm_XY`` /
    ``compute_XY``), or None when none can run there."""
    sass = [t for t in targets if t.startswith("sm_")]
    same_major = [t for t in sass if _version(t)[0] == cc[0] and _version(t) <= tuple(cc)]
    if same_major:
        return max(same_major, key=_version)
    ptx = [t for t in targets if t.startswith("compute_") and _version(t) <= tuple(cc)]
    if ptx:
        return max(ptx, key=_version)
    return None


@dataclass(frozen=True)
class Found:
    family: str
    target: str
    path: Path


@functools.lru_cache(maxsize=8)
def _manifest(folder: Path) -> dict:
    path = folder / compiler.MANIFEST
    if not path.is_file():
        return {}
    return json.loads(path.read_text())


def available_targets(family: str, folder: Path | None = None) -> list[str]:
    """The targets shipped for ``family`` whose image is present and built from the source
    that is beside it now."""
    folder = folder or image_dir()
    entry = _manifest(folder).get("families", {}).get(family)
    if not entry:
        return []
    if entry.get("source_digest") != compiler.source_digest(metadata.source_path(family)):
        return []  # built from another version of the source: stale
    return [t for t, info in entry.get("targets", {}).items() if (folder / info["file"]).is_file()]


def find(family: str, cc: tuple[int, int], folder: Path | None = None) -> Found | None:
    """The shipped image a device of capability ``cc`` loads for ``family``, or None."""
    folder = folder or image_dir()
    target = choose(cc, available_targets(family, folder))
    if target is None:
        return None
    return Found(family, target, folder / compiler.image_name(family, target))


def clear_cache() -> None:
    """Forget manifests read so far (after ``onnxopt kernels --build`` in this process)."""
    _manifest.cache_clear()


def compile_uncovered(cc: tuple[int, int]) -> Path | None:
    """A folder holding, for each family no shipped image covers on capability ``cc``, one
    compiled for ``sm_XY`` through PyCUDA (and its cache), with a manifest as ``build_images``
    writes; None when the shipped images cover every family, or PyCUDA or nvcc is missing (the
    library then says which image it lacks). ``libonnxopt_ops`` loads from the folder when it
    is named in $ONNXOPT_KERNEL_IMAGES."""
    uncovered = [f for f in metadata.FAMILIES if find(f, cc) is None]
    if not uncovered or compiler.find_nvcc() is None:
        return None
    from . import pycuda_backend

    if pycuda_backend.available() is not None:
        return None
    arch = compiler.arch_for(cc)
    folder = compiler.cache_dir().parent / "images" / arch
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / compiler.MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    families = manifest.setdefault("families", {})
    for family in uncovered:
        digest = compiler.source_digest(metadata.source_path(family))
        name = compiler.image_name(family, arch)
        if families.get(family, {}).get("source_digest") == digest and (folder / name).is_file():
            continue
        image = pycuda_backend.compile_family(metadata.source_path(family), arch)
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_bytes(image)
        os.replace(tmp, folder / name)
        families[family] = {"source_digest": digest, "targets": {arch: {"file": name}}}
    tmp = folder / f".{compiler.MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, manifest_path)
    _manifest.cache_clear()
    return folder
