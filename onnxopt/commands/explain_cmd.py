"""``onnxopt explain``: why each candidate region was or was not fused, in the file ``optimize``
writes (the safeguard's checks run as there: a region held back is said so, with why)."""

from __future__ import annotations

import contextlib
import os
import sys

import click

from onnxopt.commands.options import (
    check_rule_options,
    debug_option,
    rule_names,
    rule_options,
    write_json,
)
from onnxopt.commands.report import print_explain
from onnxopt.errors import UsageError
from onnxopt.exporter.destination import check_outputs
from onnxopt.options import OptimizeOptions
from onnxopt.safeguard import explain_guarded, safeguard_lines


@click.command("explain")
@click.argument("model", type=click.Path())
@click.option("--rule", default=None, metavar="RULE",
              help=f"Only this rule's regions. Rules: {', '.join(rule_names())}.")
@click.option("--target", type=click.Choice(["cpu", "cuda"]), default=None,
              help="Target device the legality checks and kernel choices are for (default: "
                   "cuda only where a CUDA device is usable).")
@click.option("--determinism", type=click.Choice(["strict", "relaxed"]), default="relaxed",
              show_default=True, help="strict: only kernels with a fixed reduction order.")
@rule_options
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the regions and kernel choices as JSON; '-' prints it on "
                   "stdout, and the human listing goes to stderr.")
@debug_option
def explain(model: str, rule: str | None, target: str | None, determinism: str,
            only: tuple[str, ...], disable: tuple[str, ...], json_path: str | None,
            debug: bool) -> None:
    """List every candidate region of MODEL: fused, refused (with the legality reason, or the
    safeguard's where it held the fusion back) or a partial match (with where it stopped), and
    the kernel chosen for each fused op."""
    if not os.path.exists(model):
        raise UsageError(f"{model}: no such file")
    if rule and rule not in rule_names():
        raise UsageError(f"unknown rule '{rule}' (rules: {', '.join(rule_names())})")
    check_rule_options(only, disable)
    check_outputs({"--json": json_path}, [("MODEL", model)])
    options = OptimizeOptions(target=target, determinism=determinism, only=frozenset(only),
                              disable=frozenset(disable), debug=debug)
    result = explain_guarded(model, options, rule=rule)
    # With the JSON on stdout, the listing a person reads goes to stderr.
    with contextlib.redirect_stdout(sys.stderr) if json_path == "-" else contextlib.nullcontext():
        print_explain(result)
        for line in safeguard_lines(result.safeguard or {}):
            click.echo(line)
    if json_path:
        write_json(json_path, result.to_json())
