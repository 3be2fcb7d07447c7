"""The safeguard: nothing is written that is less fit than the input.

Every result is checked before it is saved (:mod:`onnxopt.verification.loadable`:
the ONNX checker, ONNX Runtime's own load, tensor bytes), each check only where the
input passes it. A result that fails — or a stage that raised — is not written;
instead the run is repeated with parts of it held back until the result passes:

1. the *units* of the failed run are listed: every fusion region it made
   (``fuse:RULE@ROOT``) and every normalization pass that changed something
   (``pass:NAME``); after a stage raised, every rule and every pass;
2. the run with all of them held back must pass (else: the pure round trip,
   else the input exactly as it was);
3. then units are given back in halves, keeping each half that still passes,
   until what stays held back is as small as this search finds (a few runs for
   one culprit among many units).

The report says what was held back and why, and ``optimize`` prints it: the
user gets the most optimized model that is still fit, never a broken one.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

from onnx import ModelProto

from onnxopt import evaluation
from onnxopt.exporter.save import StagedFile
from onnxopt.holdback import minimal_hold, units_of
from onnxopt.importer.load import read_model_proto, read_model_with_data, tensor_bytes
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import OptimizeResult, Progress, StageFailure, run_pipeline
from onnxopt.verification.loadable import Fitness, file_fitness, fitness, serialized_parts

Attempt = tuple["OptimizeResult | None", list[str]]


def optimize_guarded(source: str | ModelProto, options: OptimizeOptions,
                     progress: Progress | None = None,
                     stage: Callable[[list[bytes]], StagedFile] | None = None) -> OptimizeResult:
    """:func:`onnxopt.pipeline.run_pipeline`, with the safeguard around it. ``stage`` writes
    the first result's bytes beside the output, and its checks load that file; a result that
    passes carries it (``staged``) for the writer to put in place, one that fails does not."""
    guard = _Guard(source, options, stage)
    first, problems = guard.attempt(frozenset(), progress)
    if not problems:
        unchecked = guard.unchecked.get(frozenset())
        first.report.stages["safeguard"] = {
            "checks": f"not loaded: {unchecked}" if unchecked else "passed"}
        return first
    if progress is not None:
        progress("safeguard")  # the runs that hold parts back
    start = time.perf_counter()
    units = units_of(first, options)
    result, held, fallback = guard.search(units)
    result.report.stage_seconds["safeguard"] = time.perf_counter() - start
    result.report.stages["safeguard"] = {
        "checks": "failed, then passed" if fallback != "original" else "failed",
        "problem": problems[0], "held_back": sorted(held), "fallback": fallback}
    return result


class _Guard:
    def __init__(self, source: str | ModelProto, options: OptimizeOptions,
                 stage: Callable[[list[bytes]], StagedFile] | None = None) -> None:
        self.source = source
        self.options = options
        self.stage = stage
        self._baseline: Fitness | None = None
        self._tried: dict[frozenset[str], Attempt] = {}
        self.unchecked: dict[frozenset[str], str] = {}

    def attempt(self, hold: frozenset[str], progress: Progress | None = None) -> Attempt:
        """The pipeline with ``hold`` held back, and what the checks found (empty: fit)."""
        if hold in self._tried:
            return self._tried[hold]
        options = dataclasses.replace(self.options, hold_back=self.options.hold_back | hold)
        try:
            # The input's unchanged weights stay out of the result's proto: its bytes are put
            # together from their encodings (serialized_parts), and what hands the proto on
            # takes it whole (OptimizeResult.whole_proto).
            result = run_pipeline(self.source, options, progress, keep_left_out=True)
        except StageFailure as e:
            outcome: Attempt = (None, [str(e)])
        else:
            size = tensor_bytes(result.proto, result.external, left_out=result.left_out)
            # Serialized once: the first result's pieces are written beside the output and the
            # checks load that file (the writer then only renames it); a result of the search
            # is checked from its bytes, joined.
            layout: dict = {}  # where each initializer lies in those bytes (the checks' light copy)
            parts = serialized_parts(result.proto, result.external, size=size,
                                     encoded=result.encoded, layout=layout)
            staged = serialized = None
            if self.stage is not None and parts is not None and not hold:
                if progress is not None:
                    progress("write")  # the weights' copy beside the output
                staged = self.stage(parts)
            if progress is not None:
                progress("checks")
            checked_file = staged.tmp if staged is not None and _checkable(staged.tmp) else None
            if parts is not None and checked_file is None:
                serialized = b"".join(parts)
            try:
                found = fitness(result.proto, result.external, serialized=serialized, size=size,
                                tensor_budget=result.model.source_tensor_bytes,
                                staged=checked_file, layout=layout)
            except BaseException:
                if staged is not None:
                    staged.discard()
                raise
            problems = found.problems()
            keep = not hold and not problems  # the first attempt, and it passed: written as is
            if not keep and staged is not None:
                staged.discard()
                staged = None
            # Only that attempt keeps its bytes: the search's attempts all stay in ``_tried``,
            # and each one's bytes would be another copy of the weights in memory.
            result = dataclasses.replace(result, serialized=serialized if keep else None,
                                         staged=staged)
            if found.unchecked:
                self.unchecked[hold] = found.unchecked
            if problems:
                problems = found.problems(self.baseline())
            outcome = (result, problems)
        self._tried[hold] = outcome
        return outcome

    def baseline(self) -> Fitness:
        """The input's own fitness (checker and load only), computed once, when needed."""
        if self._baseline is None:
            proto = self.source if isinstance(self.source, ModelProto) else None
            if proto is None:
                proto = read_model_proto(self.source)
                if any(t.data_location == 1 for t in proto.graph.initializer):
                    self._baseline = file_fitness(self.source)
                    return self._baseline
            self._baseline = fitness(proto)
        return self._baseline

    def search(self, units: list[str]) -> tuple[OptimizeResult, frozenset[str], str]:
        everything = frozenset(units)
        result, problems = self.attempt(everything)
        if problems:
            round_trip = dataclasses.replace(self.options, fuse=False)
            plain = _Guard(self.source, round_trip)
            plain._baseline = self._baseline
            result, problems = plain.attempt(frozenset())
            if not problems:
                return result, everything, "round trip"
            return self._original(), everything, "original"
        held = minimal_hold(units, lambda hold: not self.attempt(frozenset(hold))[1])
        result, _ = self.attempt(frozenset(held))
        return result, frozenset(held), "partial"

    def _original(self) -> OptimizeResult:
        """The input as it was (the round trip's IR stands in for the model)."""

        plain = run_pipeline(self.source, dataclasses.replace(self.options, fuse=False))
        if isinstance(self.source, ModelProto):
            proto = self.source
        elif plain.model.had_external_data:
            proto = read_model_with_data(self.source)  # its weights, to be written anew
        else:
            proto = read_model_proto(self.source)
        # Another proto than the round trip's: its initializers' positions are its own.
        return dataclasses.replace(plain, proto=proto, external={}, encoded={}, left_out={},
                                   passthrough=True)


def _checkable(staged: str) -> bool:
    """Whether the checks' children can open the staged file: the checker's and ORT's C++ take
    UTF-8 paths (a folder may be named in other bytes), and a umask may leave the file
    unreadable to its owner. Otherwise the result is checked from its bytes: a path's trouble
    must not fail a good model."""
    return evaluation.native_path(staged) and os.access(staged, os.R_OK)
