"""Compare two models output by output on the same inputs.

Both models run in ONNX Runtime (CPU, one thread, so runs are repeatable), one after the
other (:mod:`.runs`: never both sessions at once), on several size sets, then — where the
optimized model holds a kernel that switches plans with the sequence length (causal
attention in query blocks) — once more at a long sequence (``LONG_SEQUENCE``) so that it
takes its other path, when the original model accepts that length — and where it chooses
kernels by query length (a decode step's and a prefill's), once at one query after a cache
(:mod:`.decode_run`), so that the decode kernel is compared too. For each output the
report gives the largest absolute error and the error relative to the output's magnitude;
an output passes where, on every run, ``max |a - b| <= atol + rtol * max |a|`` (``a``: the
original's output): a float32 output under rtol 1e-4, float16/bfloat16 under 2e-2, atol 0 by
default; integers and booleans only when equal. Outputs that depend on a random op are made
comparable by a shared seed or left uncompared with the reason (:mod:`.random_ops`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

import numpy as np
from onnx import ModelProto

from onnxopt import evaluation, ort_helper
from onnxopt.errors import ModelError, UnverifiedError, UsageError
from onnxopt.importer.load import map_model_file
from onnxopt.isolation import NativeCrash
from onnxopt.verification.decode_run import decode_step
from onnxopt.verification.dims import graph_inputs, spatial_hints
from onnxopt.verification.inputs import (
    LONG_SEQUENCE,
    SPATIAL_SIZES,
    length_symbols,
    save_input_files,
    split_shapes,
)
from onnxopt.verification.random_ops import plan_random
from onnxopt.verification.runs import (
    OriginalJob,
    OriginalRuns,
    WorkFolder,
    open_session,
    run_optimized,
    run_original,
)

TOLERANCE = {"float32": 1e-4, "float64": 1e-7, "float16": 2e-2, "bfloat16": 5e-2}


@dataclass
class OutputDiff:
    """One output over every run: the largest errors, whether each run stayed within
    ``atol + tolerance * magnitude``, or why it was not compared."""

    name: str
    dtype: str
    max_abs: float = 0.0
    max_rel: float = 0.0
    bitwise: bool = True
    tolerance: float = 0.0  # relative (rtol)
    atol: float = 0.0
    within: bool = True
    not_compared: str | None = None

    @property
    def compared(self) -> bool:
        return self.not_compared is None

    @property
    def ok(self) -> bool:
        """Passed, or not compared (which the report counts apart)."""
        return not self.compared or self.bitwise or self.within

    @property
    def result(self) -> str:
        if not self.compared:
            return "not compared"  # why: in the report's notes
        return "bitwise equal" if self.bitwise else ("ok" if self.ok else "MISMATCH")

    def to_json(self) -> dict:
        return self.__dict__ | {"ok": self.ok, "compared": self.compared}


class NotVerified(UnverifiedError):
    """Verification could not run to the end, or compared nothing; ``report`` holds what it
    found before (the runs made, the outputs compared)."""

    def __init__(self, message: str, report: VerifyReport) -> None:
        super().__init__(message)
        self.report = report
        report.unverified = report.unverified or message.removeprefix("could not verify: ")


@dataclass
class VerifyReport:
    outputs: list[OutputDiff] = field(default_factory=list)
    runs: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    long_run_skipped: str | None = None  # why the long-sequence run did not happen
    # Why the decode-step run (one query, where the optimized model switches kernels by query
    # length) did not happen; None: it did, or nothing switches so.
    decode_run_skipped: str | None = None
    decode_run: int | None = None  # the index in ``runs`` of the decode-step run
    inputs_from: list[str] | None = None  # the user's input files (None: generated inputs)
    # The optimized model failed on an input the original runs on: a mismatch like any other.
    fails: str | None = None
    # Why verification stopped short (a model killed), or compared no output.
    unverified: str | None = None
    seeded: list[str] = field(default_factory=list)  # random nodes run with a shared seed
    saved_inputs: list[str] = field(default_factory=list)  # --save-inputs files written
    compared_runs: int = 0  # runs whose outputs were compared (of len(runs))
    # Per compared run, the value of each branch switch (a one-element bool input, such as a
    # merged decoder's use_cache_branch): which If branches the comparison went through.
    switches: list[dict[str, bool]] = field(default_factory=list)

    def switch_values(self) -> dict[str, list[bool]]:
        """Each switch input and the values it took in the compared runs, in order."""
        out: dict[str, list[bool]] = {}
        for run in self.switches:
            for name, value in run.items():
                out.setdefault(name, []).append(value)
        return out

    @property
    def ok(self) -> bool:
        """Every compared output matched, and at least one output was compared."""
        return (self.fails is None and self.unverified is None
                and all(o.ok for o in self.outputs) and any(o.compared for o in self.outputs))

    @property
    def bitwise(self) -> bool:
        compared = [o for o in self.outputs if o.compared]
        return bool(compared) and all(o.bitwise for o in compared)

    def notes(self) -> list[str]:
        """The report's lines beyond the table: what was seeded, saved, left uncompared and
        why verification stopped short."""
        lines = []
        if self.seeded:
            lines.append(f"random ops run with the same seed in both models: "
                         f"{', '.join(self.seeded)}")
        lines += [f"{o.name}: not compared: {o.not_compared}" for o in self.outputs
                  if not o.compared]
        if self.runs and self.compared_runs < len(self.runs):
            lines.append(f"compared on {self.compared_runs} of {len(self.runs)} runs")
        for name, values in self.switch_values().items():
            if len(set(values)) > 1:
                lines.append(f"{name}: both branches compared ({values.count(True)} runs "
                             f"true, {values.count(False)} false)")
            else:
                lines.append(f"{name}: only {values[0]} compared: the branches it switches to "
                             f"when {not values[0]} were not run")
        if self.decode_run is not None:
            lines.append(f"run {self.decode_run + 1} is a decode step (one query after a "
                         f"cache): it takes the decode kernels of the query-length switch")
        if self.decode_run_skipped:
            lines.append(f"decode-step run skipped (its kernels not compared): "
                         f"{self.decode_run_skipped}")
        if self.unverified:
            lines.append(f"not verified: {self.unverified}")
        if self.saved_inputs:
            lines.append(f"inputs saved: {', '.join(self.saved_inputs)}")
        return lines

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "bitwise": self.bitwise,
            "runs": [{k: list(v) for k, v in r.items()} for r in self.runs],
            "compared_runs": self.compared_runs,
            "switches": self.switch_values(),
            "long_run_skipped": self.long_run_skipped,
            "inputs": self.inputs_from or "generated",
            "saved_inputs": self.saved_inputs,
            "fails": self.fails,
            "unverified": self.unverified,
            "seeded_random_ops": self.seeded,
            "outputs": [o.to_json() for o in self.outputs],
        }


def verify_models(original: str | ModelProto, optimized: str | ModelProto, *, runs: int = 2,
                  seed: int = 0, rtol: float | None = None, atol: float = 0.0,
                  providers: list[str] | None = None,
                  long_sequence: int | None = LONG_SEQUENCE,
                  inputs: list[tuple[str, dict[str, np.ndarray]]] | None = None,
                  shapes: dict[str, tuple[int, ...]] | None = None,
                  save_inputs: str | None = None) -> VerifyReport:
    """Compare every output of the two models, in this process.

    With ``inputs`` (``(label, feeds)`` pairs, e.g. from ``--inputs FILE.npz``) both
    models run on exactly those. Otherwise on ``runs`` random size sets — where
    ``shapes`` pins inputs (``{"input_ids": (1, 128)}``, which sizes their symbolic dims
    for every input) or symbolic dims (``{"seq": (128,)}``), one-element boolean switches
    alternate between True and False so both branches of an ``If`` they choose are
    compared, and sizes the original refuses are retried (longer lengths, other image
    sides) — then at ``long_sequence`` (where the optimized model switches plans with the
    length and the original accepts that length; None: never). ``save_inputs``: a folder
    to write each run's inputs to (``runN.npz``). Raises :class:`NotVerified` (an
    :class:`UnverifiedError`, with the report of what was found) when the original runs on
    no input onnxopt can make or no output can be compared: nothing compared is not a
    mismatch.
    """
    return _verify(original, optimized, _here, {
        "runs": runs, "seed": seed, "rtol": rtol, "atol": atol, "providers": providers,
        "long_sequence": long_sequence, "inputs": inputs, "shapes": shapes,
        "save_inputs": save_inputs})


def verify_isolated(original: str | ModelProto, optimized: str | ModelProto,
                    **options) -> VerifyReport:
    """:func:`verify_models` with each model run in a child forked from the ORT helper (what
    the commands run, :mod:`onnxopt.ort_helper`), the original's child ended before the
    optimized model's starts: a model that crashes its native code, or is killed for memory,
    ends in the report of what was found and one line, not onnxopt's death."""
    return _verify(original, optimized, _in_child, options)


def make_session(model: str | ModelProto, providers: list[str] | None = None):
    """A quiet one-thread ORT session (repeatable runs) for a path or proto; models with
    onnxopt's kernels go through the bridge."""
    return open_session(model, providers, {})


def _here(fn, *args):
    return fn(*args)


def _in_child(fn, *args):
    return ort_helper.call(fn, *args)


def _verify(original: str | ModelProto, optimized: str | ModelProto, call, options: dict
            ) -> VerifyReport:
    """Plan from both models' graphs, run the original, then the optimized model (each
    through ``call``), and compare run by run."""
    options = {"runs": 2, "seed": 0, "rtol": None, "atol": 0.0, "providers": None,
               "long_sequence": LONG_SEQUENCE, "inputs": None, "shapes": None,
               "save_inputs": None} | options
    ref_proto, opt_proto = _proto(original), _proto(optimized)
    _same_interface(ref_proto, opt_proto)
    plan = plan_random(ref_proto, opt_proto)
    pinned, overrides = split_shapes(options["shapes"] or {}, ref_proto)
    report = VerifyReport(seeded=plan.seeded_names())
    long_sequence = options["long_sequence"] if _switches_with_length(opt_proto) else None
    if long_sequence and not options["inputs"]:
        report.long_run_skipped = _long_run_impossible(ref_proto, overrides)
        long_sequence = None if report.long_run_skipped else long_sequence
    job = OriginalJob(runs=options["runs"], seed=options["seed"],
                      given=len(options["inputs"] or ()), long_sequence=long_sequence,
                      pinned=pinned, overrides=overrides,
                      sides=spatial_hints(ref_proto) or SPATIAL_SIZES, seeds=plan.seeds,
                      decode=None if options["inputs"] else decode_step(opt_proto))
    compute = compute_tolerance(ref_proto)
    del ref_proto, opt_proto  # the children read the models themselves
    folder = WorkFolder(tempfile.mkdtemp(prefix="onnxopt-verify-"))
    try:
        if options["inputs"] is not None:
            report.inputs_from = [label for label, _ in options["inputs"]]
            for k, given in enumerate(options["inputs"]):
                folder.write(folder.file(k, "given"), given)
        found = _original_runs(original, options["providers"], folder, job, call, report)
        report.long_run_skipped = report.long_run_skipped or found.long_run_skipped
        report.decode_run_skipped = found.decode_run_skipped
        report.decode_run = found.decode_run
        if options["save_inputs"]:
            report.saved_inputs = save_input_files(options["save_inputs"], [
                folder.read(folder.file(k, "feeds")) for k in range(len(found.shapes))])
        report.outputs = [_diff(name, dtype, options["rtol"], options["atol"], compute,
                                plan.not_compared.get(name))
                          for name, dtype in zip(found.outputs, found.types)]
        crash = _crash_of(call, run_optimized, optimized, options["providers"], folder.path,
                          len(found.shapes), plan.seeds)
        _compare_runs(report, folder, len(found.shapes))
        _account_for(report, folder, crash)
    finally:
        shutil.rmtree(folder.path, ignore_errors=True)
    if report.unverified:
        raise NotVerified(f"could not verify: {report.unverified}", report)
    if not any(o.compared for o in report.outputs):
        reasons = "; ".join(f"{o.name} {o.not_compared}" for o in report.outputs)
        raise NotVerified(f"could not verify: no output can be compared ({reasons})", report)
    return report


def _original_runs(original, providers, folder: WorkFolder, job: OriginalJob, call,
                   report: VerifyReport) -> OriginalRuns:
    """The original's runs; where it could not run to the end, :class:`NotVerified` with what
    its files say."""
    try:
        return call(run_original, original, providers, folder.path, job)
    except NativeCrash as e:
        done = 0
        while folder.has(folder.file(done, "expected")):  # the runs it finished
            feeds = folder.read(folder.file(done, "feeds"))
            report.runs.append({n: tuple(np.shape(a)) for n, a in feeds.items()})
            done += 1
        where = (f"running the original model (after {done} runs)"
                 if folder.marked("original.loaded") else "loading the original model")
        raise NotVerified(f"could not verify: ONNX Runtime {_how(e)} {where}", report) from None
    except UnverifiedError as e:
        raise NotVerified(str(e), report) from None


def _crash_of(call, fn, *args) -> NativeCrash | None:
    try:
        call(fn, *args)
    except NativeCrash as e:
        return e
    return None


def _compare_runs(report: VerifyReport, folder: WorkFolder, count: int) -> None:
    """Compare, run by run, what both models wrote (one run's outputs in memory at a time)."""
    for k in range(count):
        feeds = folder.read(folder.file(k, "feeds"))
        report.runs.append({n: tuple(np.shape(a)) for n, a in feeds.items()})
        if folder.has(folder.file(k, "failed")):
            shapes = ", ".join(f"{n}{list(np.shape(a))}" for n, a in feeds.items())
            report.fails = report.fails or (
                f"the optimized model fails on {shapes}, where the original runs: "
                f"{folder.read(folder.file(k, 'failed'))}")
            continue
        if not folder.has(folder.file(k, "actual")):
            continue
        expected = folder.read(folder.file(k, "expected"))
        actual = folder.read(folder.file(k, "actual"))
        for diff, a, b in zip(report.outputs, expected, actual):
            if diff.compared:
                _accumulate_value(diff, a, b)
        report.compared_runs += 1
        report.switches.append(_switches(feeds))


def _switches(feeds: dict) -> dict[str, bool]:
    """The one-element bool inputs of a run (If-branch switches) and their values."""
    return {n: bool(np.asarray(a).reshape(-1)[0]) for n, a in feeds.items()
            if np.asarray(a).dtype == np.bool_ and np.size(a) == 1}


def _account_for(report: VerifyReport, folder: WorkFolder, crash: NativeCrash | None) -> None:
    """What a crash of the optimized model's child means: killed (for memory, most often) —
    verification stopped short; any other death where the original ran — a failure of the
    optimized model."""
    if crash is None:
        return
    done = report.compared_runs + sum(1 for k in range(len(report.runs))
                                      if folder.has(folder.file(k, "failed")))
    loaded = folder.marked("optimized.loaded")
    if "SIGKILL" in str(crash):
        where = (f"running the optimized model on run {done + 1} of {len(report.runs)}"
                 if loaded else "loading the optimized model")
        report.unverified = (f"ONNX Runtime {_how(crash)} {where} ({report.compared_runs} runs "
                             "compared before)")
    else:
        where = f"on run {done + 1} of {len(report.runs)}" if loaded else "loading it"
        report.fails = report.fails or (f"the optimized model crashes ONNX Runtime "
                                        f"({_death(crash)}) {where}, where the original runs")


def _how(crash: NativeCrash) -> str:
    death = _death(crash)
    if "SIGKILL" in death:
        return f"was killed ({death}: out of memory, or stopped from outside)"
    return f"crashed ({death})"


def _death(crash: NativeCrash) -> str:
    """How the child died, from :class:`NativeCrash`'s words: "signal SIGKILL", "exit code 1"."""
    return str(crash).split("(", 1)[-1].rstrip(")")


def _diff(name: str, dtype: str, rtol: float | None, atol: float, compute: float,
          not_compared: str | None) -> OutputDiff:
    tolerance = rtol if rtol is not None else (
        max(TOLERANCE.get(dtype, 0.0), compute) if dtype in TOLERANCE else 0.0)
    return OutputDiff(name, dtype, tolerance=tolerance, atol=atol, not_compared=not_compared)


def _same_interface(a: ModelProto, b: ModelProto) -> None:
    outputs_a = [o.name for o in a.graph.output]
    outputs_b = [o.name for o in b.graph.output]
    if outputs_a != outputs_b:
        raise ModelError(f"the models have different outputs: {outputs_a} vs {outputs_b}")
    inputs_a = sorted(vi.name for vi in graph_inputs(a))
    inputs_b = sorted(vi.name for vi in graph_inputs(b))
    if inputs_a != inputs_b:
        raise ModelError(f"the models have different inputs: {inputs_a} vs {inputs_b}")


def _long_run_impossible(proto: ModelProto, overrides: dict[str, int]) -> str | None:
    """Why a run at a long sequence cannot differ from the others, or None."""
    symbols = length_symbols(proto)
    if not symbols:
        return "the model has no sequence dimension"
    if all(s in overrides for s in symbols):
        return f"--shape fixes its sequence dims ({', '.join(symbols)})"
    return None


def _switches_with_length(proto: ModelProto) -> bool:
    """Whether a node was emitted by a kernel that changes its plan with the sequence length
    (stage 6 records it in the node's metadata)."""
    return any(p.key == "onnxopt.switch_seq"
               for n in evaluation.all_node_protos(proto.graph) for p in n.metadata_props)


def compute_tolerance(model: ModelProto) -> float:
    """The tolerance of the precision a model computes in, not just of its outputs.

    A float16 model with float32 inputs and outputs (onnxconverter-common's
    ``keep_io_types``) or a dynamically quantized one is only as exact as its
    half-precision or 8-bit interior.
    """
    half = sum(1 for t in model.graph.initializer if t.data_type in (10, 16))
    quantized = any(n.op_type in ("DynamicQuantizeLinear", "MatMulInteger", "QuantizeLinear",
                                  "QLinearMatMul", "DynamicQuantizeMatMul") for n in model.graph.node)
    if quantized:
        return TOLERANCE["float16"]
    if half and half * 2 >= sum(1 for t in model.graph.initializer if t.data_type in (1, 10, 16)):
        return TOLERANCE["float16"]
    return 0.0


def _accumulate_value(diff: OutputDiff, a, b) -> None:
    """One run's output of each model: a tensor, or a sequence of them (compared item by
    item; a different length is a mismatch)."""
    if isinstance(a, list) or isinstance(b, list):
        if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b):
            _mismatch(diff)
            return
        for x, y in zip(a, b):
            _accumulate_value(diff, x, y)
        return
    if isinstance(a, dict) or isinstance(b, dict):
        if a != b:
            _mismatch(diff)
        return
    _accumulate(diff, np.asarray(a), np.asarray(b))


def _accumulate(diff: OutputDiff, a: np.ndarray, b: np.ndarray) -> None:
    """Fold one run's tensors into ``diff``: the largest errors, and whether this run is within
    ``atol + tolerance * max |a|``."""
    if a.shape != b.shape:
        _mismatch(diff)
        return
    if a.dtype.kind in "fc":
        same = np.array_equal(a, b, equal_nan=True)
        with np.errstate(invalid="ignore"):  # inf - inf: left out below, with the NaNs
            err = np.abs(a.astype(np.float64) - b.astype(np.float64))
        finite = np.isfinite(a) & np.isfinite(b)
        # NaN where the other is not, or an infinity the other does not share
        off = bool(np.any((np.isnan(a) != np.isnan(b)) | ((~finite) & ~np.isnan(a) & (a != b))))
        max_abs = float(err[finite].max()) if finite.any() else 0.0
        scale = float(np.abs(a[np.isfinite(a)]).max()) if np.isfinite(a).any() else 0.0
        max_rel = max_abs / max(scale, 1e-12)
        if off:
            max_abs = max_rel = float("inf")
        within = max_abs <= diff.atol + diff.tolerance * scale
    elif a.dtype.kind in "biu":
        same = np.array_equal(a, b)
        max_abs = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0
        max_rel = 0.0 if same else float("inf")
        within = same
    else:  # strings, objects: equal or not
        same = np.array_equal(a, b)
        max_abs = max_rel = 0.0 if same else float("inf")
        within = same
    diff.bitwise = diff.bitwise and bool(same)
    diff.within = diff.within and bool(within)
    diff.max_abs = max(diff.max_abs, max_abs)
    diff.max_rel = max(diff.max_rel, max_rel)


def _mismatch(diff: OutputDiff) -> None:
    diff.bitwise = diff.within = False
    diff.max_abs = diff.max_rel = float("inf")


def _proto(model: str | ModelProto) -> ModelProto:
    """The model's graph, its large weights left in the file (mapped, not read)."""
    if isinstance(model, ModelProto):
        return model
    if not os.path.exists(model):
        raise UsageError(f"{model}: no such file")
    return map_model_file(model).proto


__all__ = ["NotVerified", "OutputDiff", "VerifyReport", "make_session", "split_shapes",
           "verify_isolated", "verify_models"]
