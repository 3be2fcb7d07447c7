"""Compare two models output by output on the same random inputs.

Both models run in ONNX Runtime (CPU, one thread, so runs are repeatable) on
several size sets, then — where the optimized model holds a kernel that
switches plans with the sequence length (causal attention in query blocks) —
once more at a long sequence (``LONG_SEQUENCE``) so that it takes its other
path, when the original model accepts that length. For each output
the report gives the largest absolute error and the error relative to the
output's magnitude; a float32 output passes under 1e-4 relative,
float16/bfloat16 under 2e-2, integers and booleans only when equal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
from onnx import ModelProto

from onnxopt import evaluation, ort_helper
from onnxopt.errors import ModelError, UnverifiedError, UsageError
from onnxopt.importer.load import read_model_proto
from onnxopt.isolation import NativeCrash
from onnxopt.verification.inputs import (
    LONG_SEQUENCE,
    LONGER_SIZES,
    length_symbols,
    make_inputs,
    size_sets,
)

TOLERANCE = {"float32": 1e-4, "float64": 1e-7, "float16": 2e-2, "bfloat16": 5e-2}


@dataclass
class OutputDiff:
    name: str
    dtype: str
    max_abs: float = 0.0
    max_rel: float = 0.0
    bitwise: bool = True
    tolerance: float = 0.0

    @property
    def ok(self) -> bool:
        return self.bitwise or (self.tolerance > 0 and self.max_rel <= self.tolerance)


@dataclass
class VerifyReport:
    outputs: list[OutputDiff] = field(default_factory=list)
    runs: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    long_run_skipped: str | None = None  # why the long-sequence run did not happen
    inputs_from: list[str] | None = None  # the user's input files (None: generated inputs)
    # The optimized model failed on an input the original runs on: a mismatch like any other.
    fails: str | None = None

    @property
    def ok(self) -> bool:
        return self.fails is None and all(o.ok for o in self.outputs)

    @property
    def bitwise(self) -> bool:
        return all(o.bitwise for o in self.outputs)

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "bitwise": self.bitwise,
            "runs": [{k: list(v) for k, v in r.items()} for r in self.runs],
            "long_run_skipped": self.long_run_skipped,
            "inputs": self.inputs_from or "generated",
            "fails": self.fails,
            "outputs": [o.__dict__ | {"ok": o.ok} for o in self.outputs],
        }


def verify_models(original: str | ModelProto, optimized: str | ModelProto, *, runs: int = 2,
                  seed: int = 0, rtol: float | None = None,
                  providers: list[str] | None = None,
                  long_sequence: int | None = LONG_SEQUENCE,
                  inputs: list[tuple[str, dict[str, np.ndarray]]] | None = None,
                  shapes: dict[str, tuple[int, ...]] | None = None) -> VerifyReport:
    """Compare every output of the two models.

    With ``inputs`` (``(label, feeds)`` pairs, e.g. from ``--inputs FILE.npz``) both
    models run on exactly those. Otherwise on ``runs`` random size sets — where
    ``shapes`` pins inputs (``{"input_ids": (1, 128)}``) or symbolic dims
    (``{"seq": (128,)}``), one-element boolean switches alternate between True and
    False so both branches of an ``If`` they choose are compared, and lengths the
    original refuses are retried longer — then at ``long_sequence`` (where the
    optimized model switches plans with the length and the original accepts that
    length; None: never). Raises :class:`UnverifiedError` when the original runs on
    no input onnxopt can make: nothing compared is not a mismatch.
    """
    ref_proto = _proto(original)
    sess_a = make_session(original, providers)
    sess_b = make_session(optimized, providers)
    names_a = [o.name for o in sess_a.get_outputs()]
    names_b = [o.name for o in sess_b.get_outputs()]
    if names_a != names_b:
        raise ModelError(f"the models have different outputs: {names_a} vs {names_b}")
    in_a = sorted(i.name for i in sess_a.get_inputs())
    in_b = sorted(i.name for i in sess_b.get_inputs())
    if in_a != in_b:
        raise ModelError(f"the models have different inputs: {in_a} vs {in_b}")
    types = {o.name: _ort_dtype(o.type) for o in sess_a.get_outputs()}
    compute = compute_tolerance(ref_proto)
    diffs = {n: OutputDiff(n, types[n], tolerance=rtol if rtol is not None else (
        max(TOLERANCE.get(types[n], 0.0), compute) if types[n] in TOLERANCE else 0.0))
        for n in names_a}
    report = VerifyReport(outputs=list(diffs.values()))

    def compare(feeds: dict[str, np.ndarray], out_a: list) -> None:
        report.runs.append({n: tuple(np.shape(a)) for n, a in feeds.items()})
        try:
            out_b = evaluation.run(sess_b, feeds)
        except Exception as e:  # noqa: BLE001 - the optimized model's failure is the finding
            shapes = ", ".join(f"{n}{list(np.shape(a))}" for n, a in feeds.items())
            report.fails = report.fails or (f"the optimized model fails on {shapes}, where the "
                                            f"original runs: {_first_line(e)}")
            return
        for name, a, b in zip(names_a, out_a, out_b):
            _accumulate(diffs[name], np.asarray(a), np.asarray(b))

    if inputs is not None:
        report.inputs_from = [label for label, _ in inputs]
        for label, feeds in inputs:
            compare(feeds, _run_given(sess_a, feeds, label, in_a))
        return report
    pinned, overrides = split_shapes(shapes or {}, ref_proto)
    for k, sizes in enumerate(size_sets(runs)):
        feeds, out_a = _runnable(sess_a, ref_proto, sizes, seed + k, pinned, overrides,
                                 flag=k % 2 == 0)
        if out_a is None:
            raise UnverifiedError(
                f"could not verify: the original model does not run on any input onnxopt "
                f"generated ({feeds}); give inputs with --inputs FILE.npz or sizes with "
                "--shape NAME=DIMS")
        compare(feeds, out_a)
    if long_sequence and not pinned and _switches_with_length(_proto(optimized)):
        report.long_run_skipped = _long_run(report, diffs, sess_a, sess_b, names_a, ref_proto,
                                            long_sequence, seed + runs, overrides)
    return report


def verify_isolated(original: str | ModelProto, optimized: str | ModelProto,
                    **options) -> VerifyReport:
    """:func:`verify_models` in a child forked from the ORT helper (what the commands run,
    :mod:`onnxopt.ort_helper`): both models run in ONNX Runtime, and a model that crashes its
    native code must end in one line, not take onnxopt down."""
    try:
        return ort_helper.call(_verify_models, original, optimized, options)
    except NativeCrash as e:
        raise UnverifiedError(f"could not verify: ONNX Runtime crashed running the models "
                              f"({str(e).split('(', 1)[-1].rstrip(')')})") from None


def _verify_models(original: str | ModelProto, optimized: str | ModelProto,
                   options: dict) -> VerifyReport:
    """:func:`verify_models` as the ORT helper calls it (positional arguments only)."""
    return verify_models(original, optimized, **options)


def split_shapes(shapes: dict[str, tuple[int, ...]], proto: ModelProto
                 ) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """``--shape`` entries as whole-input shapes (NAME is a graph input) and sizes of symbolic
    dims (NAME is a dim's name); anything else is a usage error."""
    inputs = {vi.name: vi for vi in proto.graph.input}
    symbols = {d.dim_param for vi in proto.graph.input if vi.type.HasField("tensor_type")
               for d in vi.type.tensor_type.shape.dim if d.dim_param}
    pinned, overrides = {}, {}
    for name, dims in shapes.items():
        if name in inputs:
            rank = len(inputs[name].type.tensor_type.shape.dim)
            if rank and len(dims) != rank:
                raise UsageError(f"--shape {name}: {len(dims)} dims given, the input has {rank}")
            pinned[name] = tuple(dims)
        elif name in symbols and len(dims) == 1:
            overrides[name] = dims[0]
        else:
            known = ", ".join(sorted(inputs) + sorted(symbols))
            raise UsageError(f"--shape {name}: neither an input of the model nor one of its "
                             f"symbolic dims (one size) ({known})")
    return pinned, overrides


def _run_given(sess, feeds: dict[str, np.ndarray], label: str, names: list[str]) -> list:
    """The original's outputs on the user's inputs; a one-line error naming what is wrong."""
    missing = sorted(set(names) - set(feeds))
    extra = sorted(set(feeds) - set(names))
    if missing or extra:
        what = "; ".join(p for p in (f"missing {', '.join(missing)}" if missing else "",
                                     f"not inputs of the model: {', '.join(extra)}" if extra
                                     else "") if p)
        raise UsageError(f"{label}: {what}")
    try:
        return evaluation.run(sess, feeds)
    except Exception as e:
        raise UsageError(f"{label}: the original model does not run on these inputs: "
                         f"{_first_line(e)}") from e


def _switches_with_length(proto: ModelProto) -> bool:
    """Whether a node was emitted by a kernel that changes its plan with the sequence length
    (stage 6 records it in the node's metadata)."""
    return any(p.key == "onnxopt.switch_seq"
               for n in evaluation.all_node_protos(proto.graph) for p in n.metadata_props)


def _long_run(report, diffs, sess_a, sess_b, names, ref_proto, seq: int, seed: int,
              overrides: dict[str, int]) -> str | None:
    """One run at sequence length ``seq``; the reason it was skipped, or None."""
    feeds = make_inputs(ref_proto, {"batch": 2, "other": seq}, seed=seed, overrides=overrides)
    if {n: tuple(a.shape) for n, a in feeds.items()} in report.runs:
        return "the model has no sequence dimension"
    feeds, out_a = _runnable(sess_a, ref_proto, {"batch": 2, "other": seq}, seed, {},
                             overrides, longer=False)
    if out_a is None:
        return f"the original does not run at sequence {seq}: {feeds}"
    report.runs.append({n: tuple(a.shape) for n, a in feeds.items()})
    for name, a, b in zip(names, out_a, evaluation.run(sess_b, feeds)):
        _accumulate(diffs[name], np.asarray(a), np.asarray(b))
    return None


def _runnable(sess, proto: ModelProto, sizes: dict, seed: int, pinned: dict, overrides: dict,
              flag: bool | None = None, longer: bool = True):
    """(inputs, outputs) of the first size assignment the original runs on — one size for
    every length first, then consistent mixes (a cache's ``past + seq``), then the same at
    longer lengths — or (ORT's words on the first failure, None)."""
    first_error = None
    for length in (sizes["other"], *(LONGER_SIZES if longer else ())):
        at = {**sizes, "other": length}

        def attempt(more, at=at):
            feeds = make_inputs(proto, at, seed=seed, overrides={**more, **overrides},
                                pinned=pinned, flag=flag)
            return feeds, evaluation.run(sess, feeds)

        result, error = evaluation.first_consistent(length_symbols(proto), length, attempt)
        if result is not None:
            return result
        first_error = first_error or error
    lines = str(first_error).strip().splitlines() or [type(first_error).__name__]
    return lines[-1].split("Status Message: ", 1)[-1][:200], None


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


def _accumulate(diff: OutputDiff, a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape:
        diff.bitwise = False
        diff.max_abs = diff.max_rel = float("inf")
        return
    if a.dtype.kind in "fc":
        same = np.array_equal(a, b, equal_nan=True)
        err = np.abs(a.astype(np.float64) - b.astype(np.float64))
        finite = np.isfinite(a) & np.isfinite(b)
        nan_mismatch = bool(np.any(np.isnan(a) != np.isnan(b)))
        max_abs = float(err[finite].max()) if finite.any() else 0.0
        scale = float(np.abs(a[np.isfinite(a)]).max()) if np.isfinite(a).any() else 0.0
        max_rel = max_abs / max(scale, 1e-12)
        if nan_mismatch:
            max_abs = max_rel = float("inf")
    else:
        same = np.array_equal(a, b)
        max_abs = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0
        max_rel = 0.0 if same else float("inf")
    diff.bitwise = diff.bitwise and bool(same)
    diff.max_abs = max(diff.max_abs, max_abs)
    diff.max_rel = max(diff.max_rel, max_rel)


def make_session(model: str | ModelProto, providers: list[str] | None = None):
    """A quiet one-thread ORT session (repeatable runs) for a path or proto; models with
    onnxopt's kernels go through the bridge."""
    try:
        return evaluation.session(model, providers, threads=1)
    except Exception as e:
        label = model if isinstance(model, str) else "<model>"
        raise ModelError(f"{label}: ONNX Runtime cannot load it: {_first_line(e)}") from e


def _proto(model: str | ModelProto) -> ModelProto:
    if isinstance(model, ModelProto):
        return model
    if not os.path.exists(model):
        raise UsageError(f"{model}: no such file")

    return read_model_proto(model)


def _ort_dtype(t: str) -> str:
    return {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
            "tensor(bfloat16)": "bfloat16"}.get(t, t.removeprefix("tensor(").rstrip(")"))


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[-1][:200] if text else type(e).__name__


__all__ = ["OutputDiff", "VerifyReport", "make_session", "verify_models"]
