"""Run one fuzz case and classify what onnxopt did with it.

Why: a fuzz case is only useful with a sharp oracle. For every case the model
bytes are written into a fresh folder, hashed, and ``onnxopt optimize IN -o OUT
--target cpu -q`` is run (in this process through ``onnxopt.cli.main`` — the
worker pool in :mod:`fuzz.pool` kills and replaces a worker that hangs — or as a
child process). Then:

- exit 0, 1 or 2 is fine on its own; exit 3 is an internal error, and so is a warning that
  onnxopt worked around an internal error of its own ("internal_warning": the safeguard
  kept the run alive, but a pass still raised); any traceback on stderr is a bug, a
  changed input file is a bug, files left behind are a bug;
- if the *original* loads and runs in ONNX Runtime (CPU) on generated inputs, the
  model is valid: refusing it (exit 1/2) is "refused valid", an output that ORT cannot
  load or run, or whose inputs/outputs differ, is "broken output", and outputs that
  differ beyond tolerance are a "wrong result".

Verdicts in :data:`BUG_VERDICTS` are bugs; ``ok`` and ``clean_error`` are not;
``skipped`` marks cases that could not be built or checked (not onnxopt's fault).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

TIMEOUT_S = 10.0
BUG_VERDICTS = ("crash", "hang", "internal_error", "internal_warning", "traceback",
                "input_modified", "stray_files", "refused_valid", "broken_output",
                "wrong_result")
OK_VERDICTS = ("ok", "clean_error", "skipped")
RTOL, ATOL = 1e-4, 1e-5
LOW_PRECISION_RTOL = 2e-2
NONDETERMINISTIC_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                        "Multinomial", "Bernoulli"}
INPUT_NAME, OUTPUT_NAME = "model.onnx", "out.onnx"


@dataclass
class Case:
    """A model to feed onnxopt, and how it was made (enough to rebuild it)."""

    case_id: str
    data: bytes
    origin: str
    recipe: dict[str, Any] = field(default_factory=dict)
    extra_files: dict[str, bytes] = field(default_factory=dict)


@dataclass
class Outcome:
    """What happened to one case."""

    case_id: str
    verdict: str
    problems: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    exit_code: int | None = None
    message: str = ""
    detail: str = ""
    signature: str = ""
    seconds: float = 0.0
    total_seconds: float = 0.0
    ort_ran: bool | None = None
    origin: str = ""
    recipe: dict[str, Any] = field(default_factory=dict)
    size: int = 0
    data: bytes | None = None
    extra_files: dict[str, bytes] = field(default_factory=dict)

    @property
    def is_bug(self) -> bool:
        return self.verdict in BUG_VERDICTS


@dataclass
class CliResult:
    code: int | None
    stdout: str
    stderr: str
    seconds: float
    exc: str = ""  # the traceback of an internal error, when run in-process


# ----------------------------------------------------------------------------- running onnxopt


_EXC_LOG: list[str] = []


def _install_exception_hook() -> None:
    """Record the traceback of any exception leaving the click group, without changing what
    ``onnxopt.cli.main`` does with it (it still prints one line and returns 3)."""
    from onnxopt import cli

    if getattr(cli.cli, "_fuzz_hooked", False):
        return
    original = cli.cli.main

    def main(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except BaseException:
            _EXC_LOG.append(traceback.format_exc())
            raise

    cli.cli.main = main
    cli.cli._fuzz_hooked = True


def cli_args(model: str, output: str) -> list[str]:
    return ["optimize", model, "-o", output, "--target", "cpu", "-q"]


def run_inprocess(model: str, output: str, extra: tuple[str, ...] = ()) -> CliResult:
    """``onnxopt.cli.main`` in this process, stdout/stderr captured."""
    from onnxopt import cli

    _install_exception_hook()
    _EXC_LOG.clear()
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(cli_args(model, output) + list(extra))
        except BaseException as e:  # noqa: BLE001 - main must not raise; if it does, it is ours
            _EXC_LOG.append(traceback.format_exc())
            err.write(f"onnxopt: escaped {type(e).__name__}: {e}\n")
            code = 3
    seconds = time.perf_counter() - start
    return CliResult(code, out.getvalue(), err.getvalue(), seconds,
                     _EXC_LOG[-1] if _EXC_LOG else "")


def onnxopt_command() -> list[str]:
    script = Path(sys.executable).with_name("onnxopt")
    return [str(script)] if script.exists() else [sys.executable, "-m", "onnxopt"]


def run_subprocess(model: str, output: str, timeout: float = TIMEOUT_S,
                   extra: tuple[str, ...] = ()) -> CliResult:
    """The real command line in a child process (``code`` None on timeout)."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(onnxopt_command() + cli_args(model, output) + list(extra),
                              capture_output=True, text=True, timeout=timeout,
                              errors="replace", check=False)
    except subprocess.TimeoutExpired as e:
        return CliResult(None, _text(e.stdout), _text(e.stderr), time.perf_counter() - start)
    return CliResult(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start)


def absorbed_errors(stderr: str) -> list[str]:
    """Lines where onnxopt says it worked around a bug of its own (exit 0, "please report")."""
    return [ln.strip() for ln in stderr.splitlines()
            if ln.startswith("onnxopt: warning:") and ("internal error" in ln
                                                       or "please report" in ln)]


def needs_traceback(result: CliResult) -> bool:
    return not result.exc and (result.code == 3 or bool(absorbed_errors(result.stderr)))


def debug_traceback(model: str, mode: str) -> str:
    """The traceback of the same run with ``--debug`` (which lets stage errors propagate and
    prints them); its output goes to a scratch folder that is then removed."""
    scratch = tempfile.mkdtemp(prefix="fuzzdbg_")
    try:
        output = str(Path(scratch) / OUTPUT_NAME)
        if mode == "inprocess":
            result = run_inprocess(model, output, ("--debug",))
            return result.exc or result.stderr
        return run_subprocess(model, output, TIMEOUT_S, ("--debug",)).stderr
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


# ----------------------------------------------------------------------------- ONNX Runtime


def ort_session(path: str | bytes, ort_fusions: bool = False) -> Any:
    """A CPU session with one thread, newest opsets allowed, and no graph optimizations
    (unless ``ort_fusions``: ORT's default level, its own fused kernels)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    if not ort_fusions:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.allow_released_opsets_only", "0")
    try:
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception:
        if isinstance(path, bytes) or not _uses_onnxopt_domain(path):
            raise
        from onnxopt.runtime import session

        options = ort.SessionOptions()
        options.log_severity_level = 4
        options.intra_op_num_threads = 1
        return session(path, providers=["CPUExecutionProvider"], sess_options=options)


def _uses_onnxopt_domain(path: str) -> bool:
    import onnx

    try:
        model = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001 - unreadable: not ours to register
        return False
    return any(i.domain.startswith("ai.onnxopt") for i in model.opset_import)


_NP_TYPES = {"float": np.float32, "float16": np.float16, "double": np.float64,
             "int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int8,
             "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
             "bool": np.bool_, "string": np.object_}


def _array(name: str, elem: str, shape: list[int], rng: np.random.Generator) -> np.ndarray:
    dtype = _NP_TYPES.get(elem)
    if dtype is None:
        raise ValueError(f"no generator for tensor({elem})")
    if dtype is np.object_:
        return np.array(["a", "bb"] * (int(np.prod(shape)) // 2 + 1), dtype=object)[
            :int(np.prod(shape))].reshape(shape)
    if dtype is np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if np.issubdtype(dtype, np.integer):
        if "mask" in name.lower():
            return np.ones(shape, dtype)
        return np.asarray(rng.integers(0, 3, shape)).astype(dtype)
    return np.asarray(rng.standard_normal(shape)).astype(dtype)


def _feed(name: str, type_str: str, shape: list[Any], sizes: dict[str, int], default: int,
          rng: np.random.Generator) -> Any:
    match = re.fullmatch(r"(seq|optional)\((.*)\)", type_str)
    if match:
        inner = _feed(name, match.group(2), shape, sizes, default, rng)
        return [inner, inner] if match.group(1) == "seq" else inner
    elem = re.fullmatch(r"tensor\((\w+)\)", type_str)
    if not elem:
        raise ValueError(f"no generator for {type_str}")
    dims = []
    for d in shape or []:
        if isinstance(d, int) and d >= 0:
            dims.append(d)
        else:
            dims.append(sizes.setdefault(str(d), default))
    return _array(name, elem.group(1), dims, rng)


def size_plans(symbols: list[str]) -> list[tuple[dict[str, int], int]]:
    """Symbolic-dim assignments to try in turn: all 3, all 1, distinct small sizes."""
    distinct = {s: 2 + i for i, s in enumerate(symbols)}
    return [({}, 3), ({}, 1), (distinct, 2)]


def make_feeds(sess: Any, sizes: dict[str, int], default: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    sizes = dict(sizes)
    return {i.name: _feed(i.name, i.type, i.shape, sizes, default, rng)
            for i in sess.get_inputs()}


def run_original(path: str | bytes, seed: int, errors: list[str] | None = None
                 ) -> tuple[Any, dict[str, Any], list[Any]] | None:
    """Load and run the original; the session, the feeds and the outputs of the first size
    plan that runs, or None when ORT does not run the model (the reasons go to ``errors``)."""
    errors = [] if errors is None else errors
    try:
        sess = ort_session(path)
    except Exception as e:  # noqa: BLE001 - ORT refuses it: not a valid model for our purpose
        errors.append(f"ORT load: {str(e)[:300]}")
        return None
    symbols = sorted({str(d) for i in sess.get_inputs() for d in (i.shape or [])
                      if not isinstance(d, int) or d < 0})
    for sizes, default in size_plans(symbols):
        try:
            feeds = make_feeds(sess, sizes, default, seed)
            return sess, feeds, sess.run(None, feeds)
        except Exception as e:  # noqa: BLE001 - try the next size plan
            errors.append(f"ORT run: {str(e)[:300]}")
    return None


def run_original_bytes(data: bytes, seed: int = 0) -> str:
    """'' when ORT loads and runs the model, else the first reason it does not."""
    errors: list[str] = []
    return "" if run_original(data, seed, errors) is not None else errors[0]


def compare(name: str, ref: Any, got: Any) -> str:
    """'' when ``got`` matches ``ref``; otherwise why not."""
    if isinstance(ref, list) or isinstance(got, list):
        if not (isinstance(ref, list) and isinstance(got, list)) or len(ref) != len(got):
            return f"{name}: sequence length/type differs"
        return next((m for m in (compare(f"{name}[{i}]", r, g)
                                 for i, (r, g) in enumerate(zip(ref, got))) if m), "")
    if ref is None or got is None:
        return "" if ref is None and got is None else f"{name}: one output is None"
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.dtype != got.dtype:
        return f"{name}: dtype {got.dtype} instead of {ref.dtype}"
    if ref.shape != got.shape:
        return f"{name}: shape {got.shape} instead of {ref.shape}"
    if ref.dtype.kind not in "fc":
        bad = int(np.sum(ref != got))
        return f"{name}: {bad} of {ref.size} elements differ (exact type)" if bad else ""
    return _compare_float(name, ref, got)


def _compare_float(name: str, ref: np.ndarray, got: np.ndarray) -> str:
    r, g = ref.astype(np.float64), got.astype(np.float64)
    nan_r, nan_g = np.isnan(r), np.isnan(g)
    if (nan_r != nan_g).any():
        only_opt, only_ref = int((nan_g & ~nan_r).sum()), int((nan_r & ~nan_g).sum())
        return (f"{name}: NaN in {only_opt} positions of the optimized output only, "
                f"{only_ref} of the original's only (of {r.size})")
    inf_r, inf_g = np.isinf(r), np.isinf(g)
    if (inf_r != inf_g).any() or (r[inf_r] != g[inf_g]).any():
        return f"{name}: infinities differ ({int(inf_g.sum())} optimized, {int(inf_r.sum())} " \
               "original)"
    finite = np.isfinite(r)
    if not finite.any():
        return ""
    rtol = LOW_PRECISION_RTOL if ref.dtype in (np.float16,) else RTOL
    scale = float(np.max(np.abs(r[finite])))
    err = float(np.max(np.abs(r[finite] - g[finite])))
    if err > ATOL + rtol * scale:
        return f"{name}: max abs error {err:.3g} (output scale {scale:.3g}, rtol {rtol})"
    return ""


def deterministic(sess: Any, feeds: dict[str, Any], first: list[Any]) -> bool:
    again = sess.run(None, feeds)
    return not any(compare("o", a, b) for a, b in zip(first, again))


# ----------------------------------------------------------------------------- classification


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def first_error_line(stderr: str) -> str:
    for line in stderr.splitlines():
        if line.startswith("onnxopt:"):
            return line.strip()
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def normalize(text: str, limit: int = 160) -> str:
    """A message with the variable parts (paths, quoted names, numbers, bytes, shapes)
    blanked, for grouping."""
    text = re.sub(r"/\S*?/(model|out)\.onnx", "MODEL", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r'"[^"]*"', '"…"', text)
    text = re.sub(r"\b0x[0-9a-fA-F]+\b", "X", text)
    text = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", text)
    text = re.sub(r"\((N,? ?)*\)", "(…)", text)
    text = text.replace(" (run with --debug for the traceback)", "")
    return text[:limit]


_CHAIN = re.compile(r"\n(?:The above exception was the direct cause of the following exception:"
                    r"|During handling of the above exception, another exception occurred:)\n")


def root_cause(tb: str) -> tuple[str, str, str]:
    """(exception type, message, 'file.py:function' of the innermost onnxopt frame) of the
    first exception of a formatted traceback chain — the cause, not a stage wrapper."""
    start = tb.find("Traceback (most recent call last):")
    first = _CHAIN.split(tb[start:])[0] if start >= 0 else ""
    frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', first)
    ours = [(f, fn) for f, fn in frames if "/onnxopt/" in f and "/tests/" not in f]
    where = f"{ours[-1][0].split('/onnxopt/')[-1]}:{ours[-1][1]}" if ours else ""
    last = [ln for ln in first.strip().splitlines()[1:]
            if ln and not ln.startswith((" ", "onnxopt:", "Traceback"))]
    match = re.match(r"([\w.]+)(?:: ?(.*))?$", last[-1]) if last else None
    if match is None:
        return "", "", where
    return match.group(1).rsplit(".", 1)[-1], match.group(2) or "", where


def internal_signature(result: CliResult, verdict: str = "internal_error") -> str:
    """'VERDICT: Type @ file.py:function: message' from the root cause of the traceback
    (``--debug`` rerun), else from the one-line message."""
    lines = absorbed_errors(result.stderr) if verdict == "internal_warning" else []
    line = lines[0] if lines else first_error_line(result.stderr)
    match = re.search(r"internal error(?: in stage \w+)?: (\w+): ?(.*)", line)
    kind, msg = (match.group(1), match.group(2)) if match else ("?", line)
    root_kind, root_msg, where = root_cause(result.exc)
    if root_kind and root_kind != "StageFailure":
        kind, msg = root_kind, root_msg
    msg = re.sub(r"; \w+ result written \(please report this\)$", "", msg)
    return f"{verdict}: {kind} @ {where or '?'}: {normalize(msg, 100)}"


def output_files(path: Path) -> set[str]:
    """The output and the external-data files it references (written beside it)."""
    import onnx

    names = {path.name}
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - judged later, when ORT loads it
        return names
    from .mutations import all_graphs

    tensors = [t for g in all_graphs(model.graph) for t in g.initializer]
    tensors += [a.t for g in all_graphs(model.graph) for n in g.node for a in n.attribute
                if a.HasField("t")]
    for tensor in tensors:
        for entry in tensor.external_data:
            if entry.key == "location":
                names.add(entry.value)
    return names


def stray_files(folder: Path, expected: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in expected)


def classify_cli(case: Case, result: CliResult, folder: Path, hashes: dict[str, str]
                 ) -> list[tuple[str, str, str]]:
    """Problems visible without ONNX Runtime: (verdict, signature, detail)."""
    problems = []
    if result.code is None:
        problems.append(("hang", "hang", f"no exit after {TIMEOUT_S:.0f} s"))
    elif result.code < 0:
        problems.append(("crash", f"crash (signal {-result.code})", result.stderr[-3000:]))
    elif result.code == 3 or result.code not in (0, 1, 2):
        problems.append(("internal_error", internal_signature(result), result.exc))
    elif absorbed_errors(result.stderr):
        problems.append(("internal_warning", internal_signature(result, "internal_warning"),
                         "\n".join(absorbed_errors(result.stderr)) + "\n" + result.exc))
    if "Traceback (most recent call last)" in result.stderr:
        problems.append(("traceback", "traceback on stderr", result.stderr[-3000:]))
    changed = [n for n, h in hashes.items() if not (folder / n).exists()
               or sha256(folder / n) != h]
    if changed:
        problems.append(("input_modified", "input modified", ", ".join(changed)))
    expected = set(hashes) | (output_files(folder / OUTPUT_NAME) if result.code == 0 else set())
    extra = stray_files(folder, expected)
    if extra:
        problems.append(("stray_files", f"stray files after exit {result.code}",
                         ", ".join(extra)))
    if result.code == 0 and not (folder / OUTPUT_NAME).exists():
        problems.append(("broken_output", "broken_output: exit 0 but no output file", ""))
    return problems


def check_semantics(case: Case, result: CliResult, folder: Path, seed: int
                    ) -> tuple[bool | None, list[tuple[str, str, str]]]:
    """Run the original and (if written) the output in ORT: (original ran, problems)."""
    original = run_original(str(folder / INPUT_NAME), seed)
    if original is None:
        return False, []
    sess, feeds, ref = original
    if result.code != 0:
        line = first_error_line(result.stderr)
        checker = checker_verdict(folder / INPUT_NAME)
        detail = f"{line}\nonnx.checker (full): {checker}"
        tag = "checker passes" if checker == "passes" else "checker fails"
        return True, [("refused_valid", f"refused_valid [{tag}]: {normalize(line)}", detail)]
    out_path = folder / OUTPUT_NAME
    try:
        opt = ort_session(str(out_path))
    except Exception as e:  # noqa: BLE001 - the output does not load
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return True, [("broken_output", f"broken_output: ORT load: {normalize(msg)}", str(e))]
    interface = _interface_change(sess, opt)
    if interface:
        return True, [("broken_output", f"broken_output: {interface}", interface)]
    try:
        got = opt.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - the output does not run where the original does
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return True, [("broken_output", f"broken_output: ORT run: {normalize(msg)}", str(e))]
    if not deterministic(sess, feeds, ref):
        return True, []
    names = [o.name for o in sess.get_outputs()]
    diffs = [d for d in (compare(n, r, g) for n, r, g in zip(names, ref, got)) if d]
    if diffs and all("NaN in 0 positions of the optimized" in d for d in diffs) \
            and _as_ort_fuses_it(folder / INPUT_NAME, feeds, names, got):
        return True, []
    if diffs:
        checker = checker_verdict(folder / INPUT_NAME)
        tag = "passes" if checker == "passes" else "fails"
        if all("NaN in 0 positions of the optimized" in d for d in diffs):
            tag += ", NaN only in the original"
        return True, [("wrong_result", f"{wrong_signature(folder)} [checker {tag}]",
                       "; ".join(diffs) + f"\nonnx.checker (full): {checker}")]
    return True, []


def _as_ort_fuses_it(path: Path, feeds: dict, names: list[str], got: list) -> bool:
    """Whether the output computes exactly what ORT computes on the original at its default
    optimization level. NaN the decomposition makes of non-finite intermediates (an inf in a
    LayerNormalization row) that ORT's own fused kernels do not make either is not a change
    the user would see from ORT on the original."""
    try:
        ref = ort_session(str(path), ort_fusions=True).run(None, feeds)
    except Exception:  # noqa: BLE001 - not a question this can answer
        return False
    return not any(compare(n, r, g) for n, r, g in zip(names, ref, got))


def checker_verdict(path: Path) -> str:
    """'passes', or the checker's first line (context for a refused model ORT runs)."""
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as e:  # noqa: BLE001
        return f"fails: {str(e).strip().splitlines()[0][:200] if str(e).strip() else e!r}"
    return "passes"


def _interface_change(orig: Any, opt: Any) -> str:
    a = [(i.name, i.type) for i in orig.get_inputs()]
    b = [(i.name, i.type) for i in opt.get_inputs()]
    if sorted(a) != sorted(b):
        return f"graph inputs changed: {sorted(set(a) ^ set(b))[:4]}"
    a = [(o.name, o.type) for o in orig.get_outputs()]
    b = [(o.name, o.type) for o in opt.get_outputs()]
    if a != b:
        return f"graph outputs changed: {a[:4]} -> {b[:4]}"
    return ""


def wrong_signature(folder: Path) -> str:
    """'wrong_result: +Op,+Op' naming the op types the optimizer introduced."""
    import onnx

    def ops(path: Path) -> set[str]:
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception:  # noqa: BLE001
            return set()
        return {n.op_type for n in model.graph.node}

    added = sorted(ops(folder / OUTPUT_NAME) - ops(folder / INPUT_NAME))
    return f"wrong_result: {'+' + ',+'.join(added) if added else 'no new ops'}"


def case_seed(case_id: str) -> int:
    return int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:4], "little")


def execute(case: Case, mode: str = "inprocess", report: Any = None,
            workdir: str | None = None) -> Outcome:
    """Run ``case`` end to end. ``report(phase)`` is called before each phase (the pool uses
    it to time the onnxopt phase separately from ONNX Runtime's)."""
    report = report or (lambda phase: None)
    start = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="fuzz_", dir=workdir))
    try:
        return _execute_in(case, mode, report, folder, start)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _execute_in(case: Case, mode: str, report: Any, folder: Path, start: float) -> Outcome:
    (folder / INPUT_NAME).write_bytes(case.data)
    for name, data in case.extra_files.items():
        (folder / name).write_bytes(data)
    hashes = {n: sha256(folder / n) for n in [INPUT_NAME, *case.extra_files]}
    report("onnxopt")
    model, output = str(folder / INPUT_NAME), str(folder / OUTPUT_NAME)
    result = run_inprocess(model, output) if mode == "inprocess" else run_subprocess(model,
                                                                                     output)
    problems = classify_cli(case, result, folder, hashes)
    if needs_traceback(result) and not any(p[0] == "input_modified" for p in problems):
        report("debug")
        result.exc = debug_traceback(model, mode)
        problems = classify_cli(case, result, folder, hashes)
    ort_ran = None
    if result.code in (0, 1, 2) and not any(p[0] == "broken_output" for p in problems):
        report("ort")
        ort_ran, more = check_semantics(case, result, folder, case_seed(case.case_id))
        problems += more
    outcome = Outcome(case.case_id, "ok" if result.code == 0 else "clean_error",
                      exit_code=result.code, message=first_error_line(result.stderr),
                      seconds=result.seconds, ort_ran=ort_ran, origin=case.origin,
                      recipe=case.recipe, size=len(case.data))
    if problems:
        outcome.verdict, outcome.signature, outcome.detail = problems[0]
        outcome.problems = [p[1] for p in problems]
        outcome.verdicts = [p[0] for p in problems]
    outcome.total_seconds = time.perf_counter() - start
    return outcome


def reproducer_command(path: str) -> str:
    return " ".join(["onnxopt", *cli_args(path, "/tmp/fuzz_out.onnx")])
