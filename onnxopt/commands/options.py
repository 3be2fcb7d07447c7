"""What the commands share: the ``--debug`` option and writing a JSON report."""

from __future__ import annotations

import json
import os

import click

from onnxopt.commands import json_report


def debug_option(f):
    return click.option("--debug", is_flag=True,
                        help="Show tracebacks; verify the IR after every pass.")(f)


def write_json(path: str, data: dict, command: str | None = None) -> None:
    """Write ``data``, the report of ``command`` (default: the click command running), to
    ``path`` atomically (a temporary file, then a rename), in the versioned document of
    :mod:`onnxopt.commands.json_report`."""
    data = json_report.document(command or click.get_current_context().command.name, data)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    os.replace(tmp, path)
