"""``onnxopt ir``: print the semantic IR."""

from __future__ import annotations

import click

from onnxopt import normalize
from onnxopt.commands.options import debug_option
from onnxopt.importer import import_model
from onnxopt.ir.printer import format_graph
from onnxopt.ir.verifier import verify_graph
from onnxopt.options import OptimizeOptions


@click.command("ir")
@click.argument("model", type=click.Path())
@click.option("--normalized", is_flag=True, help="Print the IR after normalization.")
@debug_option
def ir(model: str, normalized: bool, debug: bool) -> None:
    """Print MODEL's semantic IR as text ({...} ONNX attributes, <...> recorded meaning)."""

    m = import_model(model)
    if debug:
        verify_graph(m.graph)
    if normalized:

        normalize.run(m, OptimizeOptions(debug=debug))
    opsets = ", ".join(f"{d or 'ai.onnx'}:{v}" for d, v in sorted(m.opset_imports.items()))
    producer = f"{m.producer_name} {m.producer_version}".strip()
    click.echo(f"# ir_version {m.ir_version}; opsets {opsets}"
               + (f"; producer {producer}" if producer else ""))
    click.echo(format_graph(m.graph))
