"""The Python API: ``optimize``, ``verify`` and ``explain``.

    import onnxopt
    proto = onnxopt.optimize("model.onnx", output="model.opt.onnx", target="cpu")
    report = onnxopt.verify("model.onnx", "model.opt.onnx")
    assert report.ok
"""

from __future__ import annotations

import os
from typing import Any

from onnx import ModelProto

from onnxopt.bisection import bisect as run_bisect
from onnxopt.errors import UsageError
from onnxopt.exporter.destination import check_outputs
from onnxopt.exporter.save import TrialFolder, inline_external, save_model, stage_bytes
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import OptimizeResult
from onnxopt.safeguard import explain_guarded, optimize_guarded
from onnxopt.verification import VerifyReport, verify_models


def optimize(model: str | os.PathLike | ModelProto, output: str | os.PathLike | None = None, *,
             options: OptimizeOptions | None = None, return_result: bool = False,
             **option_kwargs: Any) -> ModelProto | OptimizeResult:
    """Optimize a model given as a path or ModelProto; return the optimized ModelProto.

    With ``output`` the result is also written there atomically (external
    data beside it when the input had some or the model passes 2 GB), and the
    returned proto is the one written: its external tensors reference the
    output's data file and are not loaded, so memory stays flat for large
    models. Keyword options are those of :class:`OptimizeOptions`
    (``target="cpu"``, ...).
    """
    options = options or OptimizeOptions(**_option_kwargs(option_kwargs))
    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else model
    stage = None
    if output is not None:
        check_output_path(source if isinstance(source, str) else None, os.fspath(output))
        stage = staging_to(os.fspath(output))
    result = optimize_guarded(source, options, stage=stage)
    if output is not None:
        try:
            write_result(result, os.fspath(output), source if isinstance(source, str) else None)
        finally:
            if result.staged is not None:
                result.staged.discard()  # a no-op once it was put in place
    result.whole_proto()  # handed on: its own numbers, not the input file's
    if return_result:
        return result
    proto = result.proto
    if result.external and output is None:
        proto = ModelProto()
        proto.CopyFrom(result.proto)
        inline_external(proto, result.external)
    return proto


def verify(original: str | os.PathLike | ModelProto, optimized: str | os.PathLike | ModelProto,
           **kwargs: Any) -> VerifyReport:
    """Run both models on random inputs at several sizes and compare every output."""
    def norm(m):
        return os.fspath(m) if isinstance(m, (str, os.PathLike)) else m
    return verify_models(norm(original), norm(optimized), **kwargs)


def bisect(model: str | os.PathLike | ModelProto, output: str | os.PathLike | None = None, *,
           inputs: list[tuple[str, dict]] | None = None, **option_kwargs: Any):
    """Optimize, verify, and on a mismatch find the fusions or passes that cause it.

    Returns a :class:`onnxopt.bisection.BisectReport` (``culprits``, ``lines()``); with
    ``output`` the model optimized without the culprits is written there.
    """

    options = OptimizeOptions(**_option_kwargs(option_kwargs))
    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else model
    found = run_bisect(source, options, {"inputs": inputs} if inputs else {})
    if output is not None and found.culprits:
        write_result(found.result, os.fspath(output), source if isinstance(source, str) else None)
    return found


def explain(model: str | os.PathLike | ModelProto, **option_kwargs: Any):
    """Every candidate region with what matched and why it was or was not fused (held back by
    the safeguard included: what ``optimize`` would write)."""

    options = OptimizeOptions(**_option_kwargs(option_kwargs))
    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else model
    return explain_guarded(source, options)


def check_output_path(source: str | None, output: str) -> None:
    """Refuse, before any work, an output that would overwrite the input or cannot be written
    (:func:`onnxopt.exporter.destination.check_outputs`)."""
    check_outputs({"-o": output}, [("MODEL", source)])


def staging_to(output: str):
    """What the safeguard writes a result's bytes with, beside ``output``, while it checks."""
    return lambda data: stage_bytes(data, output)


def write_result(result: OptimizeResult, output: str, source: str | None,
                 trial: TrialFolder | None = None) -> None:
    """Write ``result`` to ``output`` atomically, never over one of the input's files; with
    ``trial``, into that folder under ``output``'s name instead, for the caller to check and
    then put in place (:meth:`TrialFolder.commit`)."""
    protected = frozenset(_source_files(result))
    if source is not None:
        protected |= {os.path.realpath(source)}
    if os.path.realpath(output) in protected:
        if result.staged is not None:
            result.staged.discard()
        raise UsageError(f"{output}: output path is one of the input's files (its external "
                         "data); refusing to overwrite it")
    if trial is not None:
        # The files the output's folder must keep keep their names in the trial folder too,
        # so that what is moved out of it never replaces them.
        folder = os.path.realpath(os.path.dirname(os.path.abspath(output)))
        protected |= {trial.inside(p) for p in protected if os.path.dirname(p) == folder}
        if result.staged is not None and result.staged.path == os.path.abspath(output):
            result.staged.path = trial.path  # its bytes move into the trial folder as they are
        output = trial.path
    save_model(result.proto, result.external, output,
               use_external=result.model.had_external_data, protected=protected,
               serialized=result.serialized, staged=result.staged, encoded=result.encoded,
               left_out=result.left_out)


def _source_files(result: OptimizeResult) -> set[str]:
    return {os.path.realpath(t.external.path) for t in result.external.values() if t.external}


def _option_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    for key in ("only", "disable"):
        if key in out and out[key] is not None:
            out[key] = frozenset(out[key])
    return out
