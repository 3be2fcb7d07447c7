"""Help and README that say what the commands take (issue 29): every option of every
command has help text, the rule names are listed where rules are named, help is plain text
(no reStructuredText markup from a docstring), and the README's command reference lists
every option of every command."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from onnxopt.cli import _register_commands
from onnxopt.rules import all_rules

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = _register_commands().commands


def _options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option)]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_has_help(name):
    missing = [p.opts[0] for p in _options(COMMANDS[name]) if not (p.help or "").strip()]
    assert missing == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_is_plain_text(cli, name):
    code, out, _ = cli(name, "--help")
    assert code == 0
    assert "``" not in out and ":func:" not in out and ":mod:" not in out


def test_ir_help_shows_the_markers_as_printed(cli):
    code, out, _ = cli("ir", "--help")
    assert code == 0 and "({...} ONNX attributes, <...> recorded meaning)" in " ".join(out.split())


@pytest.mark.parametrize("name", ["optimize", "explain"])
def test_rule_options_list_the_rules(cli, name):
    code, out, _ = cli(name, "--help")
    assert code == 0
    text = " ".join(out.split())
    for rule in {r.name for r in all_rules()}:
        assert rule in text.split("--only")[1], rule


def _reference() -> dict[str, str]:
    """The README's command reference: each command's synopsis, by command name."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Command reference", 1)[1].split("```", 2)[1]
    parts = re.split(r"^onnxopt (\w+)", block, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_readme_reference_lists_every_option(name):
    synopsis = _reference()[name]
    missing = [p.opts for p in _options(COMMANDS[name])
               if not any(re.search(re.escape(o) + r"(?![\w-])", synopsis) for o in p.opts)]
    assert missing == []
