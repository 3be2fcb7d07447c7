"""What the commands share: the ``--debug`` and rule options, and writing a JSON report."""

from __future__ import annotations

import json

import click

from onnxopt.commands import json_report
from onnxopt.errors import UsageError
from onnxopt.exporter.save import write_atomically


def debug_option(f):
    return click.option("--debug", is_flag=True,
                        help="Show tracebacks; verify the IR after every pass.")(f)


def write_json(path: str, data: dict, command: str | None = None) -> None:
    """Write ``data``, the report of ``command`` (default: the click command running), in the
    versioned document of :mod:`onnxopt.commands.json_report`, to ``path`` atomically (a
    temporary file, then a rename), or to the standard output where ``path`` is ``-``."""
    data = json_report.document(command or click.get_current_context().command.name, data)
    text = json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"
    if path == "-":
        click.echo(text, nl=False)
        return
    write_atomically(path, lambda f: f.write(text.encode()))


def rule_names() -> list[str]:
    """The fusion rules' families, as ``--only``/``--disable`` take them."""
    from onnxopt.rules import all_rules

    return sorted({r.family for r in all_rules()})


def rule_spellings() -> str:
    """The families with a rule per spelling, in words: ``layer_norm is layer_norm_op and
    layer_norm; ...`` (the names regions and hold-back units carry)."""
    from onnxopt.rules import all_rules

    members: dict[str, list[str]] = {}
    for r in all_rules():
        members.setdefault(r.family, []).append(r.name)
    return "; ".join(f"{family} is {' and '.join(names)}"
                     for family, names in sorted(members.items()) if len(names) > 1)


def rule_options(f):
    """``--only RULE`` and ``--disable RULE`` (repeatable), their help listing the rules."""
    names = f"{', '.join(rule_names())} ({rule_spellings()}: one rule per spelling)"
    f = click.option("--disable", multiple=True, metavar="RULE",
                     help=f"Do not run this fusion rule (repeatable). Rules: {names}.")(f)
    return click.option("--only", multiple=True, metavar="RULE",
                        help=f"Run only this fusion rule (repeatable). Rules: {names}.")(f)


def check_rule_options(only: tuple[str, ...], disable: tuple[str, ...]) -> None:
    """Refuse, before any work, a rule name that does not exist and a rule both asked for
    and switched off."""
    known = rule_names()
    for option, given in (("--only", only), ("--disable", disable)):
        for name in given:
            if name not in known:
                raise UsageError(f"unknown rule '{name}' given to {option} (rules: "
                                 f"{', '.join(known)})")
    both = sorted(set(only) & set(disable))
    if both:
        raise UsageError(f"--only and --disable both name {', '.join(both)}; give each rule "
                         "to one of them")
