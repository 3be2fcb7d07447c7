"""The ``onnxopt`` command line: thin wrappers over :mod:`onnxopt.api`.

Every error caused by the input prints one line (``onnxopt: error: ...``) and
exits 2 for a usage problem or 1 for a bad model; ``--debug`` shows the
traceback too and runs the IR verifier after every pass.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
import traceback

import click

from onnxopt import __version__, ort_helper
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
    # Imported here, not at the top: the commands bring onnx, NumPy and the stages (about
    # 0.25 s), and :func:`run` first starts the ORT helper so that its own load runs beside it.
    from onnxopt.commands import register

    register(cli)


def run() -> None:
    """The ``onnxopt`` console script and ``python -m onnxopt``: :func:`main` in a process
    of its own, which it tunes for one command (:func:`fewer_collections`) and ends without
    the interpreter's teardown (:func:`exit_without_teardown`)."""
    fewer_collections()
    if _asks_ort(sys.argv[1:]):
        _start_ort_helper()
    exit_without_teardown(_command(sys.argv[1:]))


def _start_ort_helper() -> None:
    """Fork the ORT helper (:mod:`onnxopt.ort_helper`) once NumPy and onnx are imported, and
    before the stages are: it loads ONNX Runtime on the other core while this process imports
    the stages, and the stages and the checks find it loaded. Forked before NumPy and onnx, it
    imported them again beside this process; forked after the stages' imports, its load met
    the import stage: either way the command was no faster (benchmarks/RESULTS.md)."""
    import numpy  # noqa: F401 - imported before the fork, for both processes
    import onnx  # noqa: F401 - the same

    ort_helper.start()


# The commands whose questions of ONNX Runtime the ORT helper answers: optimizing (facts, mask
# probes, the load check), explaining (the same stages) and verifying (both models run).
_HELPED_COMMANDS = frozenset({"optimize", "explain", "verify"})


def _asks_ort(args: list[str]) -> bool:
    """Whether ``args`` run a command the ORT helper serves (not help on it)."""
    return bool(args) and args[0] in _HELPED_COMMANDS and not {"-h", "--help"} & set(args)


def main(argv: list[str] | None = None) -> int:
    """The command line from Python: returns the exit code for ``argv``; without ``argv``
    it reads ``sys.argv`` and exits with the code (``SystemExit``, which a caller may catch).
    Neither touches the process's settings or skips its teardown; :func:`run` does."""
    code = _command(list(sys.argv[1:] if argv is None else argv))
    if argv is None:
        sys.exit(code)
    return code


def _command(args: list[str]) -> int:
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
    return code


def fewer_collections() -> None:
    """Let the cyclic garbage collector run less often in the command's own process.

    A run builds an IR of long-lived objects that refer to each other, so most young
    collections find nothing to free. With Python's default first threshold (700
    allocations) the collector ran 106 young and 9 middle collections while the 24-layer
    GPT-2 was optimized, 33-43 ms in all; at 10,000 it runs 6, in 16-20 ms, with the same
    peak memory (benchmarks/RESULTS.md). Only :func:`run` sets it: a program calling
    :func:`main` or the API keeps its own settings."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(10_000, middle, old)


def exit_without_teardown(code: int) -> None:
    """End the process with ``code`` once the command is done, skipping the interpreter's
    teardown.

    By then every file the command wrote is closed and in place. What a normal exit still
    does is free the heap object by object: a collection of the IR's reference cycles, then
    every module's objects. On a 24-layer GPT-2 that took 0.09–0.14 s of a 1.7 s command
    (benchmarks/RESULTS.md), and the kernel reclaims the same memory at once. Nothing else is
    skipped: the exit handlers run (``atexit``, which ``logging`` and temporary folders use)
    and the standard streams are flushed. Where another thread that is not a daemon still
    runs, the normal exit waits for it as Python does (a daemon thread it would not wait for:
    the printer's import, for one)."""
    main_thread = threading.main_thread()
    if any(not t.daemon for t in threading.enumerate() if t is not main_thread):
        sys.exit(code)
    atexit._run_exitfuncs()  # what a normal exit runs first; CPython has no public name
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: the descriptor was closed, or a printer dropped it
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(code)
