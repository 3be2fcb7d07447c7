"""One file per command; ``register`` adds them all to the click group."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    """Add every command to ``group``. The commands bring onnx, NumPy and the stages (about
    0.25 s): imported here, when the command line needs them, not with this package."""
    if group.commands:
        return
    from onnxopt.commands.explain_cmd import explain
    from onnxopt.commands.ir_cmd import ir
    from onnxopt.commands.kernels_cmd import kernels
    from onnxopt.commands.optimize_cmd import optimize
    from onnxopt.commands.run_cmd import run
    from onnxopt.commands.verify_cmd import verify

    for cmd in (optimize, explain, ir, verify, run, kernels):
        group.add_command(cmd)
