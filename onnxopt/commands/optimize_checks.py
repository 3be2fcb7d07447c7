"""What ``onnxopt optimize`` refuses before any work: options it would ignore or could not
honour, and outputs it could not write. Each is a one-line usage error (exit 2), and nothing
has been written when it is raised."""

from __future__ import annotations

import json
import mmap
import os

import onnx
from google.protobuf.message import DecodeError
from onnx import ModelProto, OperatorSetIdProto

from onnxopt import ort_helper
from onnxopt.commands.options import check_rule_options
from onnxopt.errors import UsageError
from onnxopt.exporter.destination import check_outputs
from onnxopt.importer.build import onnx_opset
from onnxopt.ir.wire import fields
from onnxopt.select.tuning import CACHE_FORMAT

_OPSET_IMPORT = 8  # ModelProto.opset_import's field number


def check_optimize(model: str, output: str, json_path: str | None, *, do_verify: bool,
                   do_bisect: bool, fuse: bool, ort_version: str | None, opset: int | None,
                   tune: bool, tune_cache: str | None, only: tuple[str, ...],
                   disable: tuple[str, ...], inputs: tuple[str, ...],
                   shapes: tuple[str, ...]) -> None:
    if not os.path.exists(model):
        raise UsageError(f"{model}: no such file")
    if do_bisect and not do_verify:
        raise UsageError("--bisect needs --verify (it looks for the cause of a mismatch)")
    if (inputs or shapes) and not do_verify:
        raise UsageError("--inputs and --shape choose what --verify compares on; add --verify "
                         "(without it they would be ignored)")
    if not fuse:
        ignored = [name for name, given in (("--only", only), ("--disable", disable),
                                            ("--tune", tune), ("--opset", opset),
                                            ("--ort-version", ort_version)) if given]
        if ignored:
            raise UsageError(f"--no-fuse rewrites nothing, so {', '.join(ignored)} would be "
                             "ignored; leave out one or the other")
    check_rule_options(only, disable)
    _check_opset(model, opset)
    _check_tune_cache(tune_cache, tune)
    check_outputs({"-o": output, "--json": json_path,
                   "--tune-cache": tune_cache if tune else None},
                  [("MODEL", model), ("--tune-cache", None if tune else tune_cache),
                   *(("--inputs", path) for path in inputs)])
    _check_ort_version(ort_version)  # last: it waits for the ORT helper to load ORT


def is_version(text: str) -> bool:
    parts = text.split(".")
    return len(parts) >= 2 and all(p.isdigit() for p in parts[:2])


def _major_minor(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def _check_ort_version(text: str | None) -> None:
    """``--ort-version``: MAJOR.MINOR, and no newer than the installed ONNX Runtime, as every
    result is checked by loading it there (a kernel of a newer one could not be)."""
    if text is None:
        return
    if not is_version(text):
        raise UsageError(f"--ort-version {text}: expected MAJOR.MINOR, e.g. 1.20")
    installed = ort_helper.facts().version
    if installed is not None and is_version(installed) and (
            _major_minor(text) > _major_minor(installed)):
        raise UsageError(f"--ort-version {text}: newer than the installed ONNX Runtime "
                         f"{installed}; onnxopt checks every result by loading it in the "
                         "installed one, so it can aim only at that version or an older one")


def _check_opset(model: str, opset: int | None) -> None:
    """``--opset`` only lowers the opset emitted kernels may need below the model's own:
    onnxopt never converts a model's opset, so a higher one would be ignored."""
    if opset is None:
        return
    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        raise UsageError(f"--opset {opset}: the installed onnx {onnx.__version__} knows opsets "
                         f"up to {newest}")
    declared = declared_opset(model)
    if declared is None or opset <= declared:
        return
    if declared == 0:
        raise UsageError(f"--opset {opset}: {model} imports no ONNX opset, and onnxopt never "
                         "converts a model's opset")
    raise UsageError(f"--opset {opset}: {model} imports opset {declared}, and onnxopt never "
                     f"converts a model's opset; --opset can only lower the opset emitted "
                     f"kernels may need (1 to {declared})")


def declared_opset(path: str) -> int | None:
    """The ONNX opset ``path`` imports, read from the model's top-level fields alone (the graph
    is skipped by its length, never parsed); ``None`` where the file does not read as a model,
    which the import then reports in its own words."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            view = memoryview(data)
            try:
                imports = [OperatorSetIdProto.FromString(bytes(view[start:end]))
                           for number, start, end in fields(view)
                           if number == _OPSET_IMPORT and start >= 0]
            finally:
                view.release()
    except (OSError, ValueError, DecodeError):
        return None
    return onnx_opset(ModelProto(opset_import=imports))


def _check_tune_cache(path: str | None, tune: bool) -> None:
    """``--tune-cache``: an existing file must be a decisions file (a corrupt one would be
    ignored, then overwritten by --tune); a missing one is only of use with --tune."""
    if path is None:
        return
    if not os.path.exists(path):
        if not tune:
            raise UsageError(f"{path}: no such file (--tune-cache without --tune only reads "
                             "decisions; add --tune to time kernels and write them there)")
        return
    if os.path.isdir(path):
        raise UsageError(f"{path}: --tune-cache is a directory")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) else f"not JSON: {e}"
        raise UsageError(f"{path}: --tune-cache cannot be read ({why}); remove it or name "
                         "another file") from None
    if not (isinstance(data, dict) and data.get("format") == CACHE_FORMAT
            and isinstance(data.get("entries", {}), dict)):
        raise UsageError(f"{path}: --tune-cache is not a tuning decisions file of this onnxopt "
                         f"(format {CACHE_FORMAT}); remove it or name another file")
