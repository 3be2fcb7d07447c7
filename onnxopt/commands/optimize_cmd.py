"""``onnxopt optimize``: the main job."""

from __future__ import annotations

import os

import click

from onnxopt.api import check_output_path, staging_to, write_result
from onnxopt.bisection import bisect
from onnxopt.commands.options import debug_option, write_json
from onnxopt.commands.progress import stage_progress
from onnxopt.commands.report import (
    import_rich_meanwhile,
    print_optimize,
    print_verify,
    stopped_rules,
)
from onnxopt.commands.verify_cmd import inputs_options, verify_inputs
from onnxopt.errors import UsageError, VerificationError
from onnxopt.options import OptimizeOptions
from onnxopt.safeguard import optimize_guarded
from onnxopt.verification import NotVerified, verify_isolated


def default_output(path: str) -> str:
    """``model.onnx`` → ``model.opt.onnx`` (any other name gets ``.opt.onnx`` appended)."""
    root, ext = os.path.splitext(path)
    return f"{root}.opt.onnx" if ext.lower() == ".onnx" else f"{path}.opt.onnx"


def _is_version(text: str) -> bool:
    parts = text.split(".")
    return len(parts) >= 2 and all(p.isdigit() for p in parts[:2])


def _importing_rich_at_checks(progress):
    """``progress``, which also starts importing the report's printer (rich) when the checks
    begin: their wait leaves the interpreter idle."""
    started = False

    def step(name: str) -> None:
        nonlocal started
        progress(name)
        if name == "checks" and not started:
            started = True
            import_rich_meanwhile()

    return step


@click.command("optimize")
@click.argument("model", type=click.Path())
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Where to write the result (default: MODEL with .opt.onnx).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the report (node counts, stage times, fusions) as JSON.")
@click.option("--verify", "do_verify", is_flag=True,
              help="Compare the result with MODEL in ONNX Runtime; exit 1 on a mismatch.")
@click.option("--target", type=click.Choice(["cpu", "cuda"]), default=None,
              help="Target device (default: cuda only where a CUDA device is usable).")
@click.option("--ort-version", default=None, metavar="MAJOR.MINOR",
              help="ONNX Runtime version the output must run on (default: the installed one).")
@click.option("--opset", type=click.IntRange(1, None), default=None,
              help="Highest ONNX opset emitted kernels may need (default: the model's own; "
                   "onnxopt never converts a model's opset).")
@click.option("--determinism", type=click.Choice(["strict", "relaxed"]), default="relaxed",
              show_default=True, help="strict: only kernels with a fixed reduction order.")
@click.option("--tune", is_flag=True,
              help="Time the legal kernels of each fused op on this machine; keep the fastest.")
@click.option("--tune-cache", type=click.Path(dir_okay=False), default=None,
              help="Tuning decisions file (default: ~/.cache/onnxopt/tuning.json). Without "
                   "--tune its decisions are reused but nothing is timed.")
@click.option("--only", multiple=True, help="Run only this fusion rule (repeatable).")
@click.option("--disable", multiple=True, help="Do not run this fusion rule (repeatable).")
@click.option("--no-fuse", is_flag=True, help="Rewrite nothing: import and export only (a round trip).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--bisect", "do_bisect", is_flag=True,
              help="With --verify: on a mismatch, find the fusion or pass that causes it, name "
                   "it, and write the model optimized without it.")
@inputs_options
@debug_option
def optimize(model: str, output: str | None, json_path: str | None, do_verify: bool,
             target: str | None, ort_version: str | None, opset: int | None, determinism: str,
             tune: bool, tune_cache: str | None, only: tuple[str, ...], disable: tuple[str, ...],
             no_fuse: bool, quiet: bool, do_bisect: bool, inputs: tuple[str, ...],
             shapes: tuple[str, ...], debug: bool) -> None:
    """Optimize MODEL and write the result; print a report of what changed."""

    output = output or default_output(model)
    if not os.path.exists(model):

        raise UsageError(f"{model}: no such file")
    check_output_path(model, output)
    if do_bisect and not do_verify:

        raise UsageError("--bisect needs --verify (it looks for the cause of a mismatch)")
    if ort_version is not None and not _is_version(ort_version):

        raise UsageError(f"--ort-version {ort_version}: expected MAJOR.MINOR, e.g. 1.20")
    options = OptimizeOptions(target=target, only=frozenset(only), disable=frozenset(disable),
                              opset=opset, ort_version=ort_version, determinism=determinism,
                              tune=tune, tune_cache=tune_cache,
                              fuse=not no_fuse, debug=debug)
    with stage_progress(enabled=not quiet) as clock:
        progress = clock if quiet else _importing_rich_at_checks(clock)
        result = optimize_guarded(model, options, progress=progress, stage=staging_to(output))
        progress("write")
        write_result(result, output, model)
        clock.end()  # the warnings get lines of their own
        guard = result.report.stages.get("safeguard", {})
        if str(guard.get("problem", "")).startswith("internal error"):
            # A bug of ours that the safeguard worked around: said even under -q, so it gets
            # reported.
            click.echo(f"onnxopt: warning: {guard['problem']}; {guard.get('fallback')} result "
                       "written (please report this)", err=True)
        for warning in stopped_rules(result.report):
            click.echo(f"onnxopt: warning: {warning}", err=True)
        verify_report = found = None
        if do_verify:
            progress("verify")
            given = verify_inputs(inputs, shapes)
            try:
                verify_report = verify_isolated(model, output, **given)
            except NotVerified as e:  # a model killed, nothing comparable: still say what ran
                if not quiet and e.report.runs:
                    clock.end()
                    print_verify(e.report)
                raise
            if do_bisect and not verify_report.ok:
                progress("bisect")
                found = bisect(model, options, given, first=result, first_report=verify_report)
                if found.culprits:
                    progress("write")
                    write_result(found.result, output, model)
    clock.add_to(result.report.stage_seconds)
    data = result.report.to_json()
    data["output"] = output
    if verify_report is not None:
        data["verify"] = verify_report.to_json()
    if found is not None:
        data["bisect"] = found.to_json()
    if not quiet:
        print_optimize(result.report, output)
        if verify_report is not None:
            print_verify(verify_report)
    if found is not None:
        for line in found.lines():
            click.echo(line, err=bool(found.culprits) and quiet)
    if json_path:
        write_json(json_path, data)
    if found is not None and found.culprits:
        click.echo(f"onnxopt: warning: the optimized model differed from {model}; wrote it "
                   "without the culprit found by --bisect (please report this)", err=True)
        return
    if verify_report is not None and not verify_report.ok:
        bad = ", ".join(o.name for o in verify_report.outputs if not o.ok)
        raise VerificationError(f"optimized model differs from {model} beyond tolerance: {bad}")
