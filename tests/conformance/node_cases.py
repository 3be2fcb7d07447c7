"""ONNX's node tests as a conformance check: optimize each one and compare it with the original.

ONNX ships about 1,900 single-node test models (``onnx.backend.test.case.node``); the
``backend-test-tools generate-data`` command writes them to disk, and here they are built in
memory the same way at test time, so the suite follows whatever onnx version is installed.

Each case goes through the path a user takes: the model is written to a file and
``onnxopt.optimize(path, output=out, target="cpu")`` is called (the file route runs load-time
checks that the ModelProto route skips). The output is then loaded and run in ONNX Runtime on
the case's inputs and compared with ONNX Runtime's outputs for the ORIGINAL model, not with the
case's expected outputs: ORT itself deviates from the reference on some cases, and onnxopt's
promise is to compute the same function as its input, not to fix ORT.

Floats compare at rtol 1e-4 / atol 1e-5 (atol scaled by the output's magnitude, NaN equal),
widened to two ulps for types coarser than that (float16: one rounding step of a fused kernel
is ~5e-4); integers, booleans and strings compare exactly; sequences element-wise.

Shared by ``tests/conformance/test_node_suite.py`` (CI: every case) and
``benchmarks/node_suite.py`` (every case, with the figures).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import tempfile
import traceback
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnx.numpy_helper

# ORT 1.31 refuses IR version 14, which onnx 1.23 stamps by default; every node model is
# valid at IR 13.
MAX_IR_VERSION = 13
# Comparison of the optimized model with the original (both run in ORT).
RTOL = 1e-4
ATOL = 1e-5
# ORT refuses opsets newer than its last released one unless this is "0". ORT 1.31 reads the
# environment variable at every load; the session config entry of the same meaning is not
# honoured for this check, so both are set. Even so ORT 1.31's schemas end at opset 26, so
# most opset 27/28 cases do not load ("No Op registered") and are not runnable.
RELEASED_OPSETS_ENV = "ALLOW_RELEASED_ONNX_OPSET_ONLY"
RELEASED_OPSETS_CONFIG = "session.allow_released_opsets_only"

CLASSES = ("ok", "refused", "crash", "noload", "norun", "changed", "not_runnable")

Value = Any  # an ndarray, a list of them (sequence), or None (empty optional)


@dataclass(frozen=True)
class NodeCase:
    """One node test: its model (IR restamped for ORT) and one data set."""

    name: str
    model: onnx.ModelProto
    inputs: tuple[Value, ...]
    expected: tuple[Value, ...]
    rtol: float
    atol: float


@dataclass
class CaseResult:
    """The class of one case (see ``CLASSES``), why, and whether ORT matched the reference."""

    name: str
    status: str
    detail: str = ""
    ort_matches_expected: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail,
                "ort_matches_expected": self.ort_matches_expected}


# ---------------------------------------------------------------- collection


def to_value(value: Any) -> Value:
    """A data-set entry as ORT takes it: TensorProto and NumPy scalars become arrays."""
    if value is None:
        return None
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, list):
        return [to_value(v) for v in value]
    return np.asarray(value)


def make_case(case: Any) -> NodeCase:
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    inputs, expected = case.data_sets[0]
    return NodeCase(case.name, model, tuple(to_value(v) for v in inputs),
                    tuple(to_value(v) for v in expected), case.rtol, case.atol)


@functools.lru_cache(maxsize=1)
def collect_cases() -> tuple[NodeCase, ...]:
    """Every node test of the installed onnx, sorted by name (built once per process, ~5 s)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow and divide by zero on purpose
        cases = collect_testcases(None)
    return tuple(sorted((make_case(c) for c in cases), key=lambda c: c.name))


def cases_by_name() -> dict[str, NodeCase]:
    return {c.name: c for c in collect_cases()}


# ---------------------------------------------------------------- ONNX Runtime


@contextlib.contextmanager
def unreleased_opsets_allowed() -> Iterator[None]:
    """Let ORT load opsets newer than its last release, for this block only."""
    before = os.environ.get(RELEASED_OPSETS_ENV)
    os.environ[RELEASED_OPSETS_ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[RELEASED_OPSETS_ENV]
        else:
            os.environ[RELEASED_OPSETS_ENV] = before


def session(model: str | os.PathLike | bytes) -> Any:
    """A single-threaded CPU session, quiet, accepting unreleased opsets."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4  # quiet: failures raise
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry(RELEASED_OPSETS_CONFIG, "0")
    source = os.fspath(model) if isinstance(model, os.PathLike) else model
    with unreleased_opsets_allowed():
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


# Element types NumPy holds natively; ORT's Python feeds and fetches only these as arrays.
NUMPY_ELEMENT_TYPES = frozenset({
    "float", "float16", "double", "bool", "string", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64"})


def is_ml_dtype(dtype: np.dtype) -> bool:
    """True for ml_dtypes' types (bfloat16, float8, int4, ...): NumPy numbers user types 256+."""
    return dtype.num >= 256


def is_extension_type(ort_type: str) -> bool:
    """True for ``tensor(bfloat16)``, ``tensor(float8e4m3fn)``, ``tensor(int4)``, ..."""
    return ort_type.startswith("tensor(") and ort_type[7:-1] not in NUMPY_ELEMENT_TYPES


def to_ort_value(array: np.ndarray) -> Any:
    """An ml_dtypes array as an OrtValue, through the TensorProto bytes (sub-byte types packed)."""
    import onnxruntime as ort

    proto = onnx.numpy_helper.from_array(array)
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), proto.data_type)
    raw = proto.raw_data
    if len(raw) != value.tensor_size_in_bytes():
        raise ValueError(f"{array.dtype}: {len(raw)} bytes for {value.tensor_size_in_bytes()}")
    ctypes.memmove(value.data_ptr(), raw, len(raw))
    return value


def from_ort_value(value: Any) -> Value:
    """An output OrtValue as an array; extension types as ml_dtypes arrays."""
    ort_type = value.data_type()
    if not is_extension_type(ort_type):
        return value.numpy()
    proto = onnx.TensorProto()
    proto.data_type = onnx.TensorProto.DataType.Value(ort_type[7:-1].upper())
    proto.dims.extend(value.shape())
    proto.raw_data = ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes())
    return onnx.numpy_helper.to_array(proto)


def uses_extension_types(sess: Any, inputs: Sequence[Value]) -> bool:
    arrays = [v for v in inputs if isinstance(v, np.ndarray)]
    return any(is_ml_dtype(a.dtype) for a in arrays) or any(
        is_extension_type(o.type) for o in sess.get_outputs())


def run(sess: Any, inputs: Sequence[Value]) -> list[Value]:
    """Run on inputs given by position, as the node tests give them.

    ORT's Python API takes and returns NumPy arrays only for NumPy's own types, so a model
    with bfloat16, float8, int4, ... inputs or outputs goes through OrtValues (its inputs are
    plain tensors in every node test that has such types).
    """
    names = [i.name for i in sess.get_inputs()]
    if not uses_extension_types(sess, inputs):
        return list(sess.run(None, dict(zip(names, inputs))))
    feeds = {n: to_ort_value(v) if is_ml_dtype(v.dtype) else _ort_array(v)
             for n, v in zip(names, inputs)}
    outputs = sess.run_with_ort_values([o.name for o in sess.get_outputs()], feeds)
    return [from_ort_value(v) for v in outputs]


def _ort_array(array: np.ndarray) -> Any:
    import onnxruntime as ort

    return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))


# ---------------------------------------------------------------- comparison


def as_comparable(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays (bfloat16, float8, int4, ...) as float32 or int64."""
    if not is_ml_dtype(a.dtype):
        return a
    return a.astype(np.int64 if a.dtype.name.startswith(("int", "uint")) else np.float32)


def float_tolerance(dtype: np.dtype, rtol: float, atol: float) -> tuple[float, float]:
    """(rtol, atol) no tighter than two units in the last place of ``dtype``.

    float16 has an epsilon of ~1e-3, ten times RTOL, so a fused kernel that rounds once less
    than the decomposition differs by one ulp; the tolerance is widened for such types only.
    """
    info = ml_dtypes.finfo(dtype) if is_ml_dtype(dtype) else np.finfo(dtype)
    floor = 2 * float(info.eps)
    return max(rtol, floor), max(atol, floor)


def compare_arrays(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when equal: floats within tolerance (atol scaled by magnitude, NaN equal)."""
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    g, w = as_comparable(got), as_comparable(want)
    if g.dtype.kind in "fc":
        rtol, atol = float_tolerance(got.dtype, rtol, atol)
        finite = np.abs(w[np.isfinite(w)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        close = np.isclose(g, w, rtol=rtol, atol=atol * scale, equal_nan=True)
        if close.all():
            return None
        err = np.abs(g.astype(np.complex128 if g.dtype.kind == "c" else np.float64) - w)
        worst = float(np.nanmax(np.where(close, 0.0, err)))
        return f"{int((~close).sum())}/{close.size} values differ, max abs err {worst:.3g}"
    if g.dtype == object or g.dtype.kind in "SU":
        equal = g.tolist() == w.tolist()
    else:
        equal = np.array_equal(g, w)
    return None if equal else f"{int((g != w).sum())}/{g.size} values differ (exact)"


def compare_values(got: Value, want: Value, rtol: float = RTOL, atol: float = ATOL) -> str | None:
    """None when equal; tensors, sequences element-wise, empty optionals (None) equal."""
    if got is None or want is None:
        return None if got is None and want is None else f"{_kind(got)} != {_kind(want)}"
    if isinstance(got, list) or isinstance(want, list):
        if not (isinstance(got, list) and isinstance(want, list)):
            return f"{_kind(got)} != {_kind(want)}"
        if len(got) != len(want):
            return f"sequence length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            why = compare_values(g, w, rtol, atol)
            if why:
                return f"[{i}]: {why}"
        return None
    return compare_arrays(np.asarray(got), np.asarray(want), rtol, atol)


def compare_outputs(got: Sequence[Value], want: Sequence[Value], names: Sequence[str],
                    rtol: float = RTOL, atol: float = ATOL) -> str | None:
    """None when every output is equal; else the first difference, named."""
    if len(got) != len(want):
        return f"{len(got)} outputs != {len(want)}"
    for name, g, w in zip(names, got, want):
        why = compare_values(g, w, rtol, atol)
        if why:
            return f"output {name!r}: {why}"
    return None


def _kind(value: Value) -> str:
    if value is None:
        return "None"
    if isinstance(value, list):
        return f"sequence[{len(value)}]"
    return f"tensor {np.asarray(value).dtype}{list(np.shape(value))}"


# ---------------------------------------------------------------- classification


# "/onnxruntime_src/path/file.h:56 Status ns::Function(const T*, ...) ": where ORT raised.
ORT_SOURCE_LOCATION = re.compile(r"/onnxruntime_src/\S+ (?:[\w:<>,*&\[\] ]+\([^()]*\)(?: const)? )?")


def one_line(err: BaseException) -> str:
    """An exception as one short line (ORT's messages carry a long source path first)."""
    text = ORT_SOURCE_LOCATION.sub("", " ".join(str(err).split()))
    text = f"{type(err).__name__}: {text}"
    return text if len(text) <= 300 else text[:297] + "..."


def crash_line(err: BaseException) -> str:
    """An unexpected exception with where it was raised (the innermost onnxopt frame)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "onnxopt" in f.filename]
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return one_line(err) + where


def run_original(case: NodeCase, path: Path) -> tuple[list[Value] | None, str]:
    """ORT's outputs for the original model, or None and why it does not load/run."""
    try:
        sess = session(path)
    except Exception as err:  # noqa: BLE001 - ORT raises several types
        return None, "load: " + one_line(err)
    try:
        return run(sess, case.inputs), ""
    except Exception as err:  # noqa: BLE001
        return None, "run: " + one_line(err)


def optimize_file(src: Path, dst: Path) -> tuple[str, str]:
    """("", "") when onnxopt wrote ``dst``; else ("refused" | "crash", why)."""
    import onnxopt
    from onnxopt.errors import OnnxoptError

    try:
        onnxopt.optimize(src, output=dst, target="cpu")
    except OnnxoptError as err:
        return "refused", one_line(err)
    except Exception as err:  # noqa: BLE001 - anything else is a bug in onnxopt
        return "crash", crash_line(err)
    return "", ""


def check_optimized(case: NodeCase, path: Path, reference: list[Value],
                    names: Sequence[str]) -> tuple[str, str]:
    """Load and run onnxopt's output; compare it with the original's ORT outputs."""
    try:
        sess = session(path)
    except Exception as err:  # noqa: BLE001
        return "noload", one_line(err)
    try:
        got = run(sess, case.inputs)
    except Exception as err:  # noqa: BLE001
        return "norun", one_line(err)
    why = compare_outputs(got, reference, names)
    return ("changed", why) if why else ("ok", "")


def classify(case: NodeCase, workdir: str | os.PathLike | None = None) -> CaseResult:
    """Optimize one case the way a user does and say which class it falls in."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        result = classify_in(case, Path(tmp))
    result.detail = result.detail.replace(tmp + os.sep, "")  # identical details group
    return result


def classify_in(case: NodeCase, tmp: Path) -> CaseResult:
    """``classify`` inside the temporary directory ``tmp``."""
    src, dst = tmp / "model.onnx", tmp / "model.opt.onnx"
    onnx.save_model(case.model, src)
    reference, why = run_original(case, src)
    if reference is None:
        return CaseResult(case.name, "not_runnable", why)
    names = [o.name for o in case.model.graph.output]
    matches = compare_outputs(reference, case.expected, names, case.rtol, case.atol) is None
    status, why = optimize_file(src, dst)
    if not status:
        status, why = check_optimized(case, dst, reference, names)
    return CaseResult(case.name, status, why, matches)


# ---------------------------------------------------------------- the CI slice


def ci_slice() -> list[NodeCase]:
    """The cases CI runs: all of them (the whole suite takes ~20 s on two cores).

    Kept as a function so that a slice can come back here, deterministically, if the
    suite ever outgrows CI; ``benchmarks/node_suite.py --all`` always runs every case.
    """
    return list(collect_cases())
