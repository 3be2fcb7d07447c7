"""``onnxopt optimize``: the main job.

Every option is checked before any work (:mod:`onnxopt.commands.optimize_checks`): a usage
error writes nothing. The result goes through a temporary file renamed into place; with
``--verify`` it is written to a trial folder beside the output and put in place only once it
verifies, so a model that failed never sits at ``-o`` for the next CI step to pick up (with
``--bisect``, the model written is the one without the culprit, and the report, the JSON and
the exit code are all about that model). ``--json -`` prints the JSON report on stdout; the
human report then goes to stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys

import click

from onnxopt.api import staging_to, write_result
from onnxopt.bisection import BisectReport, bisect
from onnxopt.commands.optimize_checks import check_optimize
from onnxopt.commands.options import debug_option, rule_options, write_json
from onnxopt.commands.progress import stage_progress
from onnxopt.commands.report import (
    import_rich_meanwhile,
    print_optimize,
    print_verify,
    stopped_rules,
)
from onnxopt.commands.verify_cmd import inputs_options, verify_inputs
from onnxopt.errors import OnnxoptError, UnverifiedError, VerificationError
from onnxopt.exporter.save import TrialFolder, pause_point
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import OptimizeResult
from onnxopt.safeguard import optimize_guarded
from onnxopt.select.workload import parse_regime
from onnxopt.verification import NotVerified, VerifyReport, verify_isolated


def default_output(path: str) -> str:
    """``model.onnx`` → ``model.opt.onnx`` (any other name gets ``.opt.onnx`` appended)."""
    root, ext = os.path.splitext(path)
    return f"{root}.opt.onnx" if ext.lower() == ".onnx" else f"{path}.opt.onnx"


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
              help="Write the report (node counts, stage times, fusions) as JSON; '-' prints "
                   "it on stdout, and the human report goes to stderr.")
@click.option("--verify", "do_verify", is_flag=True,
              help="Compare the result with MODEL in ONNX Runtime before writing it; on a "
                   "mismatch write nothing and exit 1.")
@click.option("--target", type=click.Choice(["cpu", "cuda"]), default=None,
              help="Target device (default: cuda only where a CUDA device is usable).")
@click.option("--ort-version", default=None, metavar="MAJOR.MINOR",
              help="ONNX Runtime version the output must run on: the installed one (the "
                   "default) or an older one.")
@click.option("--opset", type=click.IntRange(1, None), default=None,
              help="Highest ONNX opset emitted kernels may need, at most the model's own "
                   "(the default): onnxopt never converts a model's opset.")
@click.option("--determinism", type=click.Choice(["strict", "relaxed"]), default="relaxed",
              show_default=True, help="strict: only kernels with a fixed reduction order.")
@click.option("--tune", is_flag=True,
              help="Time the legal kernels of each fused op on this machine; a kernel replaces "
                   "the default only where it is clearly faster than the timing noise.")
@click.option("--tune-cache", type=click.Path(dir_okay=False), default=None,
              help="Tuning decisions file (default: ~/.cache/onnxopt/tuning.json). Without "
                   "--tune it must exist: its decisions are reused but nothing is timed.")
@click.option("--workload", "workloads", multiple=True, metavar="REGIME",
              help="A shape the model will run at, for ranking and --tune (repeatable): "
                   "KIND[:KEY=N,...] with KIND prefill or decode and KEY batch, seq (new "
                   "tokens) or past (cached tokens), e.g. decode:batch=4,past=1024 or "
                   "prefill:seq=512. Default: a prefill (batch 1, 128 tokens) and, where the "
                   "model has a key/value cache input, a decode step (1 token, past 1024 or "
                   "the cache's fixed length). Where the regimes' best kernels differ, an "
                   "attention node switches between them on its query length. Sizes pinned "
                   "by --shape are ranked as one regime more.")
@rule_options
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
             workloads: tuple[str, ...], no_fuse: bool, quiet: bool, do_bisect: bool,
             inputs: tuple[str, ...], shapes: tuple[str, ...], debug: bool) -> None:
    """Optimize MODEL and write the result; print a report of what changed."""
    output = output or default_output(model)
    check_optimize(model, output, json_path, do_verify=do_verify, do_bisect=do_bisect,
                   fuse=not no_fuse, ort_version=ort_version, opset=opset, tune=tune,
                   tune_cache=tune_cache, only=only, disable=disable, inputs=inputs,
                   shapes=shapes)
    for regime in workloads:
        parse_regime(regime)  # a malformed regime is a usage error before any work
    given = verify_inputs(inputs, shapes) if do_verify else {}
    options = OptimizeOptions(target=target, only=frozenset(only), disable=frozenset(disable),
                              opset=opset, ort_version=ort_version, determinism=determinism,
                              tune=tune, tune_cache=tune_cache,
                              fuse=not no_fuse, debug=debug, workload=tuple(workloads),
                              shapes=dict(given.get("shapes") or {}))
    # With the JSON on stdout, everything a person reads goes to stderr.
    human = contextlib.redirect_stdout(sys.stderr) if json_path == "-" else contextlib.nullcontext()
    with human:
        data, failed = _optimize(model, output, options, given, do_verify=do_verify,
                                 do_bisect=do_bisect, quiet=quiet)
    if json_path:
        write_json(json_path, data)
    if failed is not None:
        raise failed


def _optimize(model: str, output: str, options: OptimizeOptions, given: dict, *,
              do_verify: bool, do_bisect: bool, quiet: bool
              ) -> tuple[dict, VerificationError | None]:
    """Optimize, verify, bisect, write and print: the JSON report, and the error to raise
    once it is written (``None``: the model at ``output`` is the one the report describes)."""
    with stage_progress(enabled=not quiet) as clock:
        progress = clock if quiet else _importing_rich_at_checks(clock)
        result = optimize_guarded(model, options, progress=progress, stage=staging_to(output))
        try:
            progress("write")
            verify_report = None
            if do_verify:
                verify_report = _write_if_verified(result, output, model, given, progress,
                                                   clock, quiet)
            else:
                write_result(result, output, model)
        finally:
            if result.staged is not None:
                result.staged.discard()  # a no-op once it was put in place
        clock.end()  # the warnings get lines of their own
        _warn_if_held_back(result)
        found = None
        if verify_report is not None and not verify_report.ok and do_bisect:
            progress("bisect")
            found = bisect(model, options, given, first=result, first_report=verify_report)
            if found.culprits:
                progress("write")
                write_result(found.result, output, model)
    clock.add_to(result.report.stage_seconds)
    written = verify_report is None or verify_report.ok or bool(found and found.culprits)
    if found is not None and found.culprits:
        _print_bisected(found, verify_report, output, quiet)
        data = _json(found.result, output, written, found.verified, found)
        click.echo(f"onnxopt: warning: the optimized model differed from {model}; wrote it "
                   "without the culprit found by --bisect (please report this)", err=True)
        return data, None
    if not quiet:
        print_optimize(result.report, output if written else
                       f"nothing ({output} was not written: the result failed verification)")
        if verify_report is not None:
            print_verify(verify_report)
    if found is not None:
        for line in found.lines():
            click.echo(line)
    data = _json(result, output, written, verify_report, found)
    if written:
        return data, None
    bad = ", ".join(o.name for o in verify_report.outputs if not o.ok)
    return data, VerificationError(f"optimized model differs from {model} beyond tolerance: "
                                   f"{bad}; {output} was not written"
                                   + _assumed(result.report.stages.get("select")))


def _assumed(select) -> str:
    """Where a chosen kernel is not exact for every input (the report's ``assumes:`` lines),
    the likeliest cause of a mismatch: the error names the kernels, so that the one line a
    CI log keeps says where to look."""
    assumed = sorted(getattr(select, "assumptions", dict)().items())
    return "".join(f" ({kernel} was chosen assuming that {case})" for kernel, case in assumed)


def _write_if_verified(result: OptimizeResult, output: str, model: str, given: dict,
                       progress, clock, quiet: bool) -> VerifyReport:
    """Write ``result`` into a trial folder beside ``output``, verify it there, and put it in
    place only if it verifies (or where verification could not run at all); the trial
    folder is gone either way."""
    trial = TrialFolder(output)
    try:
        write_result(result, output, model, trial=trial)
        pause_point("verify")
        progress("verify")
        try:
            report = verify_isolated(model, trial.path, **given)
        except OnnxoptError as e:
            if isinstance(e, NotVerified) and not quiet and e.report.runs:
                clock.end()
                print_verify(e.report)  # a model killed, nothing comparable: what ran
            if isinstance(e, UnverifiedError):
                # No verdict on the result: the original runs on no input onnxopt can make.
                # It is not known to be bad, so it is put in place as without --verify, and
                # the error (exit 1) says how to give inputs that verify it.
                trial.commit()
            if trial.path not in str(e):
                raise
            # Said of the output the user named, not of the trial folder's copy.
            raise type(e)(str(e).replace(trial.path, output)) from None
        if report.ok:
            trial.commit()
        return report
    finally:
        trial.discard()


def _warn_if_held_back(result: OptimizeResult) -> None:
    guard = result.report.stages.get("safeguard", {})
    if str(guard.get("problem", "")).startswith("internal error"):
        # A bug of ours that the safeguard worked around: said even under -q, so it gets reported.
        click.echo(f"onnxopt: warning: {guard['problem']}; {guard.get('fallback')} result "
                   "written (please report this)", err=True)
    for warning in stopped_rules(result.report):
        click.echo(f"onnxopt: warning: {warning}", err=True)


def _print_bisected(found: BisectReport, first: VerifyReport, output: str, quiet: bool) -> None:
    """The story of a bisected run, in order: the first result's mismatch, its culprit, and
    the report of the model written without it."""
    if not quiet:
        print_verify(first)
    for line in found.lines():
        click.echo(line, err=quiet)
    if not quiet:
        print_optimize(found.result.report, output)


def _json(result: OptimizeResult, output: str, written: bool, verified: VerifyReport | None,
          found: BisectReport | None) -> dict:
    """The JSON report of the model at ``output`` (``written``: false where nothing was put
    there); ``verify`` is that model's verification, ``bisect`` what led to it."""
    data = result.report.to_json()
    data["output"] = output
    data["written"] = written
    if verified is not None:
        data["verify"] = verified.to_json()
    if found is not None:
        data["bisect"] = found.to_json()
    return data
