"""``onnxopt explain``: why each candidate region was or was not fused, in the file ``optimize``
writes (the safeguard's checks run as there: a region held back is said so, with why)."""

from __future__ import annotations

import click

from onnxopt.commands.options import debug_option, write_json
from onnxopt.commands.report import print_explain
from onnxopt.errors import UsageError
from onnxopt.options import OptimizeOptions
from onnxopt.rules import all_rules
from onnxopt.safeguard import explain_guarded, safeguard_lines


@click.command("explain")
@click.argument("model", type=click.Path())
@click.option("--rule", default=None, help="Only this rule's regions.")
@click.option("--target", type=click.Choice(["cpu", "cuda"]), default=None)
@click.option("--determinism", type=click.Choice(["strict", "relaxed"]), default="relaxed")
@click.option("--only", multiple=True, help="Run only this rule (repeatable).")
@click.option("--disable", multiple=True, help="Do not run this rule (repeatable).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
@debug_option
def explain(model: str, rule: str | None, target: str | None, determinism: str,
            only: tuple[str, ...], disable: tuple[str, ...], json_path: str | None,
            debug: bool) -> None:
    """List every candidate region of MODEL: fused, refused (with the legality reason, or the
    safeguard's where it held the fusion back) or a partial match (with where it stopped), and
    the kernel chosen for each fused op."""

    if rule and rule not in {r.name for r in all_rules()}:
        raise UsageError(f"unknown rule '{rule}' (rules: "
                         f"{', '.join(sorted({r.name for r in all_rules()}))})")
    options = OptimizeOptions(target=target, determinism=determinism, only=frozenset(only),
                              disable=frozenset(disable), debug=debug)
    result = explain_guarded(model, options, rule=rule)
    print_explain(result)
    for line in safeguard_lines(result.safeguard or {}):
        click.echo(line)
    if json_path:
        write_json(json_path, result.to_json())
