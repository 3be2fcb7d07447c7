"""The ``onnxopt`` click group, apart from :mod:`onnxopt.cli`, which imports it (and click)
only once its signal handlers are in place: a Ctrl-C while the command line starts is then
the same one line as later."""

from __future__ import annotations

import errno
import os
import sys

import click

from onnxopt import __version__

EXAMPLES = """
\b
Examples:
  onnxopt optimize models/gpt2.ts.onnx                 # writes models/gpt2.ts.opt.onnx
  onnxopt optimize model.onnx -o out.onnx --verify --json report.json
  onnxopt explain models/llama.ts.onnx --rule attention  # why (not) fused
  onnxopt kernels                                      # the kernel registry
  onnxopt ir model.onnx | less                         # the semantic IR as text
  onnxopt verify model.onnx model.opt.onnx             # compare in ONNX Runtime
"""


class _Group(click.Group):
    """The command group; a standard output closed by its reader (``onnxopt ir m | head``)
    ends the command quietly with exit 0, as the reader wanted no more."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except OSError as e:
            if e.errno != errno.EPIPE:
                raise
            _silence_stdout()
            raise click.exceptions.Exit(0) from None


def _silence_stdout() -> None:
    """After the reader of stdout went away: what is still buffered, and what is printed
    later, goes nowhere instead of failing again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no descriptor (a caller's own stream)
        pass


@click.group(cls=_Group, epilog=EXAMPLES,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="onnxopt")
def cli() -> None:
    """onnxopt: a small AI compiler for ONNX models.

    It imports a model into a semantic IR, normalizes it, fuses attention,
    normalisation and activation blocks, binds each fused op to a kernel, and
    writes a normal .onnx file that computes the same function.
    """
