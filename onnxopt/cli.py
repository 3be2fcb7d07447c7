"""The ``onnxopt`` command line: thin wrappers over :mod:`onnxopt.api`.

Every error caused by the input prints one line (``onnxopt: error: ...``) and
exits 2 for a usage problem or 1 for a bad model; ``--debug`` shows the
traceback too and runs the IR verifier after every pass.
"""

from __future__ import annotations

import sys
import traceback

import click

from onnxopt import __version__
from onnxopt.commands import register
from onnxopt.errors import OnnxoptError

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


@click.group(epilog=EXAMPLES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="onnxopt")
def cli() -> None:
    """onnxopt: a small AI compiler for ONNX models.

    It imports a model into a semantic IR, normalizes it, fuses attention,
    normalisation and activation blocks, binds each fused op to a kernel, and
    writes a normal .onnx file that computes the same function.
    """


def _register_commands() -> None:
    register(cli)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns (and exits with) the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    _register_commands()
    try:
        cli.main(args=args, prog_name="onnxopt", standalone_mode=False)
        code = 0
    except click.exceptions.Exit as e:
        code = e.exit_code
    except click.ClickException as e:
        e.show()
        code = e.exit_code
    except click.exceptions.Abort:
        click.echo("onnxopt: aborted", err=True)
        code = 130
    except OnnxoptError as e:
        if debug:
            traceback.print_exc()
        click.echo(f"onnxopt: error: {e}", err=True)
        code = e.exit_code
    except KeyboardInterrupt:
        click.echo("onnxopt: interrupted", err=True)
        code = 130
    except Exception as e:  # noqa: BLE001 - a bug of ours: one line unless --debug
        if debug:
            traceback.print_exc()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        click.echo(f"onnxopt: internal error: {type(e).__name__}: {first} "
                   "(run with --debug for the traceback)", err=True)
        code = 3
    if argv is None:
        sys.exit(code)
    return code
