"""``onnxopt run``: run a model (onnxopt's custom ops included) in ONNX Runtime."""

from __future__ import annotations

import os

import click
import numpy as np

from onnxopt.commands.options import debug_option
from onnxopt.errors import OnnxoptError, UsageError
from onnxopt.exporter.destination import check_outputs
from onnxopt.exporter.save import write_atomically
from onnxopt.importer.load import read_model_proto
from onnxopt.ir.dtypes import dtype_name, numpy_dtype
from onnxopt.runtime import RuntimeUnavailable, cuda_available, session, used_ops
from onnxopt.runtime.cuda import DOMAIN as CUDA_DOMAIN
from onnxopt.runtime.ort_module import ort
from onnxopt.verification.inputs import make_inputs


class RunError(OnnxoptError):
    """The model could not be run here (no CUDA for its kernels, or ORT refused it)."""

    exit_code = 1


@click.command("run")
@click.argument("model", type=click.Path())
@click.option("--inputs", "inputs_paths", type=click.Path(dir_okay=False), multiple=True,
              metavar="FILE.npz",
              help="An .npz of named inputs (default: random inputs that fit the model); "
                   "one set per run.")
@click.option("--provider", type=click.Choice(["cpu", "cuda"]), default=None,
              help="Execution provider (default: cuda where onnxopt's CUDA kernels can run, "
                   "else cpu, where libonnxopt_ops runs their host implementations).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the outputs to this file, as .npz (the name is kept as given).")
@click.option("--batch", default=1, show_default=True, type=click.IntRange(1),
              help="Size of batch dimensions in random inputs.")
@click.option("--seq", default=16, show_default=True, type=click.IntRange(1),
              help="Size of every other symbolic dimension in random inputs.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of random inputs.")
@debug_option
def run(model: str, inputs_paths: tuple[str, ...], provider: str | None, output: str | None,
        batch: int, seq: int, seed: int, debug: bool) -> None:
    """Run MODEL in ONNX Runtime with onnxopt's kernels registered; print its outputs.

    Models optimized for --target cuda contain ai.onnxopt.cuda ops: libonnxopt_ops runs them on
    CUDA with onnxopt's kernels, or on the CPU with their host implementations.
    """


    if not os.path.isfile(model):
        raise UsageError(f"{model}: no such file")
    if len(inputs_paths) > 1:
        raise UsageError(f"--inputs given {len(inputs_paths)} times: run takes one input set "
                         "(run it once per file)")
    inputs_path = inputs_paths[0] if inputs_paths else None
    check_outputs({"-o": output}, [("MODEL", model), ("--inputs", inputs_path)])

    proto = read_model_proto(model)  # one-line errors for files that are not ONNX models
    ours = sorted(op for domain, op in used_ops(proto) if domain == CUDA_DOMAIN)
    providers, note = _providers(provider, ours, cuda_available)
    feeds = _feeds(model, proto, inputs_path, batch, seq, seed)
    if note:
        click.echo(note, err=True)
    # ORT would also log a failing kernel's error itself; it is reported once, below.
    options, run_options = ort.SessionOptions(), ort.RunOptions()
    options.log_severity_level = run_options.log_severity_level = 4
    try:
        sess = session(model, providers=providers, sess_options=options)
        names = [o.name for o in sess.get_outputs()]
        results = sess.run(None, feeds, run_options)
    except RuntimeUnavailable as error:
        raise RunError(f"{model}: {error}") from None
    except Exception as error:
        if debug:
            raise
        raise RunError(f"{model}: ONNX Runtime failed: {_first_line(error)}") from None
    _print(names, results, sess.get_providers()[0])
    if output is not None:
        # To a file object: np.savez given a name would add .npz to one without it.
        write_atomically(output, lambda f: np.savez(f, **dict(zip(names, results))))
        click.echo(f"wrote {output}")


def _providers(choice: str | None, ours: list[str], cuda_available) -> tuple[list[str], str]:
    """(ORT providers for ``choice``, a note for the user or ""); a clear error when CUDA was
    asked for and cannot run."""
    reason = cuda_available.unavailable_reason()
    if choice == "cuda" and reason is not None:
        if ours:
            raise RunError(f"the model needs onnxopt's CUDA kernels ({', '.join(ours)}), but "
                           f"{reason}; run it with --provider cpu to use their host "
                           "implementations")
        raise RunError(f"--provider cuda: {reason}")
    if choice == "cuda" or (choice is None and reason is None):
        return ["CUDAExecutionProvider", "CPUExecutionProvider"], ""
    note = ""
    if ours:
        why = f" ({reason})" if choice is None and reason else ""
        note = (f"note: the {CUDA_DOMAIN} ops ({', '.join(ours)}) run as their host "
                f"implementations on the CPU (libonnxopt_ops){why}")
    return ["CPUExecutionProvider"], note


def _feeds(model: str, proto, inputs_path: str | None, batch: int, seq: int, seed: int) -> dict:


    initializers = {t.name for t in proto.graph.initializer}
    wanted = {vi.name: vi for vi in proto.graph.input if vi.name not in initializers}
    if inputs_path is None:
        try:
            return make_inputs(proto, {"batch": batch, "other": seq}, seed=seed)
        except ValueError as error:
            raise UsageError(f"{model}: cannot make random inputs ({error}); "
                             "pass them with --inputs FILE.npz") from None
    if not os.path.isfile(inputs_path):
        raise UsageError(f"{inputs_path}: no such file")
    try:
        with np.load(inputs_path, allow_pickle=False) as data:
            given = {name: data[name] for name in data.files}
    except Exception as error:  # noqa: BLE001 - not an npz: one line
        raise UsageError(f"{inputs_path}: not a readable .npz ({_first_line(error)})") from None
    missing = sorted(set(wanted) - set(given))
    unknown = sorted(set(given) - set(wanted))
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"not inputs of the model: {', '.join(unknown)}"] if unknown else [])
        raise UsageError(f"{inputs_path}: {'; '.join(parts)}")
    feeds = {}
    for name, vi in wanted.items():
        array = given[name]
        want = numpy_dtype(dtype_name(vi.type.tensor_type.elem_type))
        if array.dtype != want:
            if array.dtype.kind != want.kind:
                raise UsageError(f"{inputs_path}: input {name} is {array.dtype}, the model "
                                 f"takes {want}")
            array = array.astype(want)
        feeds[name] = array
    return feeds


def _print(names: list[str], results: list, provider: str) -> None:

    click.echo(f"provider: {provider}")
    for name, value in zip(names, results):
        value = np.asarray(value)
        line = f"{name}: shape {list(value.shape)} {value.dtype}"
        if value.size and (value.dtype.kind in "fiub"):
            data = value.astype(np.float64)
            finite = np.isfinite(data)
            if finite.any():
                f = data[finite]
                line += (f"  min {f.min():.4g} max {f.max():.4g} mean {f.mean():.4g} "
                         f"std {f.std():.4g}")
            if not finite.all():
                line += f"  non-finite {int((~finite).sum())}"
        click.echo(line)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
