"""``onnxopt verify``: compare two models numerically in ONNX Runtime."""

from __future__ import annotations

import os

import click

from onnxopt.api import check_output_path, write_result
from onnxopt.bisection import bisect
from onnxopt.commands.options import debug_option, write_json
from onnxopt.commands.report import print_verify
from onnxopt.errors import VerificationError
from onnxopt.options import OptimizeOptions
from onnxopt.verification import verify_isolated
from onnxopt.verification.inputs import load_input_files, parse_shapes


def inputs_options(f):
    """``--inputs FILE.npz`` (repeatable) and ``--shape NAME=DIMS`` (repeatable)."""
    f = click.option("--shape", "shapes", multiple=True, metavar="NAME=DIMS",
                     help="Pin an input's shape (input_ids=1x128) or a symbolic dim (seq=128) "
                          "for generated inputs (repeatable).")(f)
    return click.option("--inputs", multiple=True, type=click.Path(dir_okay=False),
                        metavar="FILE.npz",
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
              help="Number of input size sets (batch 1/2, several sequence lengths).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--rtol", type=float, default=None,
              help="Relative tolerance (default: 1e-4 float32, 2e-2 float16).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the comparison as JSON.")
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
           json_path: str | None, do_bisect: bool, output: str | None,
           inputs: tuple[str, ...], shapes: tuple[str, ...], debug: bool) -> None:
    """Run ORIGINAL and OPTIMIZED on the same random inputs and compare every output.

    Inputs respect symbolic dimensions (batch, seq), attention masks contain
    padding. Exits 1 when any output differs beyond tolerance.
    """

    given = verify_inputs(inputs, shapes)
    report = verify_isolated(original, optimized, runs=runs, seed=seed, rtol=rtol, **given)
    print_verify(report)
    data = report.to_json()
    if do_bisect and not report.ok:
        data["bisect"] = _bisect(original, optimized, output, dict(given, rtol=rtol))
    if json_path:
        write_json(json_path, data)
    if not report.ok:
        bad = ", ".join(o.name for o in report.outputs if not o.ok)
        raise VerificationError(f"outputs differ beyond tolerance: {bad}")


def _bisect(original: str, optimized: str, output: str | None, given: dict) -> dict:
    """Re-optimize ``original`` and bisect; print the findings, write the culprit-free model."""

    output = output or _beside(optimized, ".bisect.onnx")
    check_output_path(original, output)
    found = bisect(original, OptimizeOptions(), given)
    for line in found.lines():
        click.echo(line)
    if found.culprits:
        write_result(found.result, output, original)
        click.echo(f"bisect: wrote {output}")
    return found.to_json() | ({"output": output} if found.culprits else {})


def _beside(path: str, suffix: str) -> str:
    root, ext = os.path.splitext(path)
    return (root if ext.lower() == ".onnx" else path) + suffix
