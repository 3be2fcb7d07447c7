"""``onnxopt verify``: compare two models numerically in ONNX Runtime."""

from __future__ import annotations

import math
import os
import stat

import click

from onnxopt.api import check_output_path, write_result
from onnxopt.bisection import bisect
from onnxopt.commands.options import debug_option, write_json
from onnxopt.commands.report import print_verify
from onnxopt.errors import OnnxoptError, UsageError, VerificationError
from onnxopt.options import OptimizeOptions
from onnxopt.verification import NotVerified, VerifyReport, verify_isolated
from onnxopt.verification.inputs import load_input_files, parse_shapes

STDOUT = "-"


def inputs_options(f):
    """``--inputs FILE.npz`` (repeatable) and ``--shape NAME=DIMS`` (repeatable)."""
    f = click.option("--shape", "shapes", multiple=True, metavar="NAME=DIMS",
                     help="Pin an input's shape (input_ids=1x128: its symbolic dims too, for "
                          "every input that has them) or a symbolic dim (seq=128) for "
                          "generated inputs (repeatable).")(f)
    return click.option("--inputs", multiple=True, type=click.Path(), metavar="FILE.npz",
                        help="Compare on these inputs (one set per .npz file, arrays named "
                             "like the model's inputs) instead of generated ones "
                             "(repeatable).")(f)


def verify_inputs(inputs: tuple[str, ...], shapes: tuple[str, ...]) -> dict:
    """The keyword arguments of verify_models for the two options."""

    return {"inputs": load_input_files(list(inputs)) if inputs else None,
            "shapes": parse_shapes(list(shapes))}


@click.command("verify")
@click.argument("original", type=click.Path())
@click.argument("optimized", type=click.Path())
@click.option("--runs", default=3, show_default=True, type=click.IntRange(2, 20),
              help="Number of input size sets (batch 1/2, several sequence lengths and "
                   "image sides).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed of the generated inputs (and of random ops both models hold).")
@click.option("--rtol", type=float, default=None,
              help="Relative tolerance, of the output's largest magnitude (default: 1e-4 "
                   "float32, 2e-2 float16).")
@click.option("--atol", type=float, default=0.0, show_default=True,
              help="Absolute tolerance: an output passes where max |a-b| <= atol + rtol * "
                   "max |a| on every run.")
@click.option("--json", "json_path", type=click.Path(), default=None,
              help="Also write the comparison as JSON (- : to stdout, instead of the table).")
@click.option("--save-inputs", "save_inputs", type=click.Path(), default=None, metavar="DIR",
              help="Write the inputs of each run to DIR/runN.npz (read back with --inputs).")
@click.option("--bisect", "do_bisect", is_flag=True,
              help="On a mismatch, optimize ORIGINAL again (default options) holding back "
                   "fusions and passes by halves to find the one that causes it; write the "
                   "model optimized without it to --output.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="With --bisect: where to write the model optimized without the culprit "
                   "(default: OPTIMIZED with .bisect.onnx).")
@inputs_options
@debug_option
def verify(original: str, optimized: str, runs: int, seed: int, rtol: float | None,
           atol: float, json_path: str | None, save_inputs: str | None, do_bisect: bool,
           output: str | None, inputs: tuple[str, ...], shapes: tuple[str, ...],
           debug: bool) -> None:
    """Run ORIGINAL and OPTIMIZED on the same random inputs and compare every output.

    Inputs respect symbolic dimensions (batch, sequence, image sides), attention masks
    contain padding. Exits 1 when any output differs beyond tolerance, or when nothing
    could be compared.
    """

    if json_path is not None:
        check_json_path(json_path, (original, optimized))
    to_stdout = json_path == STDOUT
    try:
        check_tolerance("--rtol", rtol)
        check_tolerance("--atol", atol)
        if save_inputs is not None:
            check_save_folder(save_inputs)
        given = verify_inputs(inputs, shapes)
        report = verify_isolated(original, optimized, runs=runs, seed=seed, rtol=rtol,
                                 atol=atol, save_inputs=save_inputs, **given)
    except NotVerified as e:
        if not to_stdout and e.report.runs:
            print_verify(e.report)
        _write(json_path, e.report.to_json() | {"error": str(e), "exit_code": e.exit_code})
        raise
    except OnnxoptError as e:
        _write(json_path, {"ok": False, "error": str(e), "exit_code": e.exit_code})
        raise
    except Exception as e:
        _write(json_path, {"ok": False, "error": f"internal error: {type(e).__name__}: {e}",
                           "exit_code": 3})
        raise
    if not to_stdout:
        print_verify(report)
    data = report.to_json()
    if do_bisect and not report.ok:
        data["bisect"] = _bisect(original, optimized, output, dict(given, rtol=rtol, atol=atol),
                                 err=to_stdout)
    _write(json_path, data)
    if not report.ok:
        raise VerificationError(failure_message(report))


def failure_message(report: VerifyReport) -> str:
    """The one line a failed comparison ends with: the outputs that differ, else the failure
    of the optimized model."""
    bad = ", ".join(o.name for o in report.outputs if not o.ok)
    if bad:
        return f"outputs differ beyond tolerance: {bad}"
    return report.fails or "the optimized model does not match"


def check_tolerance(option: str, value: float | None) -> None:
    if value is not None and (math.isnan(value) or value < 0):
        raise UsageError(f"{option} {value:g}: a tolerance is a number >= 0")


def check_json_path(path: str, models: tuple[str, ...]) -> None:
    """Refuse, before any work, a JSON report path that cannot be written or would replace
    something it must not: a model, a folder, a device or FIFO (``/dev/null``: the atomic
    rename would replace the device node itself, where onnxopt may), a missing or
    unwritable folder. ``-`` is stdout."""
    if path == STDOUT:
        return
    for model in models:
        if os.path.abspath(path) == os.path.abspath(model) or (
                os.path.exists(path) and os.path.exists(model) and os.path.samefile(path, model)):
            raise UsageError(f"--json {path}: is one of the models being compared")
    if os.path.isdir(path):
        raise UsageError(f"--json {path}: is a directory")
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        raise UsageError(f"--json {path}: exists and is not a regular file (a device, a FIFO, "
                         "a socket); give a file path")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"--json {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--json {path}: folder {folder} is not writable")


def check_save_folder(path: str) -> None:
    """``--save-inputs DIR``: a folder (made if missing, in a folder that exists) that can be
    written."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--save-inputs {path}: exists and is not a folder")
    parent = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"--save-inputs {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--save-inputs {path}: folder {parent} is not writable")


def _write(json_path: str | None, data: dict) -> None:
    if json_path is not None:
        write_json(json_path, data)  # ("-": the standard output)


def _bisect(original: str, optimized: str, output: str | None, given: dict,
            err: bool = False) -> dict:
    """Re-optimize ``original`` and bisect; print the findings (to stderr where stdout holds
    the JSON), write the culprit-free model."""

    output = output or _beside(optimized, ".bisect.onnx")
    check_output_path(original, output)
    found = bisect(original, OptimizeOptions(), given)
    for line in found.lines():
        click.echo(line, err=err)
    if found.culprits:
        write_result(found.result, output, original)
        click.echo(f"bisect: wrote {output}", err=err)
    return found.to_json() | ({"output": output} if found.culprits else {})


def _beside(path: str, suffix: str) -> str:
    root, ext = os.path.splitext(path)
    return (root if ext.lower() == ".onnx" else path) + suffix
