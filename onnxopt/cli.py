"""The ``onnxopt`` command line: thin wrappers over :mod:`onnxopt.api`.

Every error caused by the input prints one line (``onnxopt: error: ...``) and
exits 2 for a usage problem or 1 for a bad model; ``--debug`` shows the
traceback too and runs the IR verifier after every pass. An interruption (Ctrl-C,
or SIGTERM from a CI timeout or ``docker stop``) prints ``onnxopt: interrupted``
and exits 130 or 143, with every temporary file removed.

This module imports nothing but the standard library's core when it is loaded: the
console script's signal handlers are in place before click, NumPy, onnx and the
stages load (:func:`run`), so a Ctrl-C while they do is the same one line.
"""

from __future__ import annotations

import os
import signal
import sys

from onnxopt.errors import Interrupted

# The commands that load ONNX Runtime (in this process, the ORT helper or their children):
# where one fails, a broken ONNX Runtime install is looked for (:func:`_runtime_problem`).
_ORT_COMMANDS = frozenset({"optimize", "explain", "verify", "run"})

# The signals :func:`run`'s handler raised on: an error that follows one is its echo (an ORT
# custom op's callback turns any exception into ORT's error status, which comes back as
# another exception), and the command was interrupted all the same.
_SIGNALLED: list[Interrupted] = []


def __getattr__(name: str):
    """``cli``: the click group (:mod:`onnxopt.commands.group`), imported when asked for."""
    if name == "cli":
        from onnxopt.commands.group import cli

        return cli
    raise AttributeError(f"module 'onnxopt.cli' has no attribute {name!r}")


def _register_commands():
    """The click group with every command added. Imported here, not at the top: the commands
    bring onnx, NumPy and the stages (about 0.25 s), and :func:`run` first starts the ORT
    helper so that its own load runs beside it."""
    from onnxopt.commands import register
    from onnxopt.commands.group import cli

    register(cli)
    return cli


def run() -> None:
    """The ``onnxopt`` console script and ``python -m onnxopt``: :func:`main` in a process
    of its own, which lets SIGTERM end it as Ctrl-C does (:func:`_raise_on_signals`, first of
    all), tunes it for one command (:func:`fewer_collections`) and ends it without the
    interpreter's teardown (:func:`exit_without_teardown`). An interruption while it starts
    (its imports) is the same one line as later."""
    try:
        _raise_on_signals()
        fewer_collections()
        if _asks_ort(sys.argv[1:]):
            _start_ort_helper()
    except (KeyboardInterrupt, Interrupted) as e:
        exit_without_teardown(_interrupted(e))
    exit_without_teardown(_command(sys.argv[1:]))


def _raise_on_signals() -> None:
    """SIGTERM and SIGINT raise :class:`~onnxopt.errors.Interrupted` in the main thread, so a
    CI timeout or ``docker stop`` runs the same cleanup as Ctrl-C, and click (which catches
    KeyboardInterrupt to print a blank line) lets it through; a signal ignored by whoever
    started the process (``nohup``, ``&``) stays ignored. Children forked from here (the
    native checks) get the defaults back, and die at once. Only :func:`run` does this: a
    program calling :func:`main` keeps its own handlers."""
    def interrupt(number: int, _frame) -> None:
        _SIGNALLED.append(Interrupted(number, signal.Signals(number).name))
        raise _SIGNALLED[-1]

    for number in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(number) != signal.SIG_IGN:
            signal.signal(number, interrupt)
    os.register_at_fork(after_in_child=_default_signals)


def _default_signals() -> None:
    for number, default in ((signal.SIGTERM, signal.SIG_DFL),
                            (signal.SIGINT, signal.default_int_handler)):
        if signal.getsignal(number) != signal.SIG_IGN:
            signal.signal(number, default)


def _interrupted(error: BaseException) -> int:
    """Say so in one line; the exit code a shell gives a process its signal ended."""
    _say("onnxopt: interrupted")
    return error.exit_code if isinstance(error, Interrupted) else 128 + signal.SIGINT


def _say(line: str) -> None:
    """``line`` on stderr, where stderr is still there to take it."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # closed, or dropped to None
        pass


def _start_ort_helper() -> None:
    """Fork the ORT helper (:mod:`onnxopt.ort_helper`) once NumPy and onnx are imported, and
    before the stages are: it loads ONNX Runtime on the other core while this process imports
    the stages, and the stages and the checks find it loaded. Forked before NumPy and onnx, it
    imported them again beside this process; forked after the stages' imports, its load met
    the import stage: either way the command was no faster (benchmarks/RESULTS.md)."""
    import numpy  # noqa: F401 - imported before the fork, for both processes
    import onnx  # noqa: F401 - the same

    from onnxopt import ort_helper

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
    try:
        import click
    except (KeyboardInterrupt, Interrupted) as e:
        return _interrupted(e)
    try:
        group = _register_commands()
        group.main(args=args, prog_name="onnxopt", standalone_mode=False)
        code = 0
    except (KeyboardInterrupt, Interrupted) as e:
        code = _interrupted(e)
    except click.exceptions.Exit as e:
        code = e.exit_code
    except click.ClickException as e:
        e.show()
        code = e.exit_code
    except click.exceptions.Abort as e:  # click's word for Ctrl-C in main: KeyboardInterrupt
        code = _interrupted(e.__context__ or e)
    except Exception:  # noqa: BLE001 - an error of the input's, or a bug of ours: one line
        code = _interrupted(_SIGNALLED[0]) if _SIGNALLED else _error(args, debug)
    finally:
        # What an interruption left between two steps (the steps' own cleanups ran already);
        # where the writer was never imported, nothing was written.
        save = sys.modules.get("onnxopt.exporter.save")
        if save is not None:
            save.remove_temporaries()
    return code


def _error(args: list[str], debug: bool) -> int:
    """The exception being handled, said in one line (with its traceback under ``--debug``);
    its exit code: the error's own, 1 where ONNX Runtime's install is broken, 3 for a bug."""
    from onnxopt import ort_facts
    from onnxopt.errors import OnnxoptError

    e = sys.exc_info()[1]
    if debug:
        _print_traceback()
    problem = _runtime_problem(args, e)
    if problem:
        _say(f"onnxopt: error: {problem}")
        return 1
    if isinstance(e, (OnnxoptError, ort_facts.BrokenRuntime)):
        _say(f"onnxopt: error: {e}")
        return e.exit_code
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    _say(f"onnxopt: internal error: {type(e).__name__}: {first} "
         "(run with --debug for the traceback)")
    return 3


def _print_traceback() -> None:
    import traceback

    traceback.print_exc()


def _runtime_problem(args: list[str], error: BaseException) -> str | None:
    """Where a command that loads ONNX Runtime failed: what is wrong with the ONNX Runtime
    install, if anything (else ``None``: the error is what it says). Looked for only then, in
    a child (a broken native library may crash it), so a run that works pays nothing."""
    from onnxopt import ort_facts

    if isinstance(error, ort_facts.BrokenRuntime):
        return str(error)
    if not args or args[0] not in _ORT_COMMANDS or getattr(error, "exit_code", 1) == 2:
        return None  # a usage error: nothing was run
    return _diagnosed_runtime()


_DIAGNOSIS: list[str | None] = []  # found once per process (a program may call main often)


def _diagnosed_runtime() -> str | None:
    from onnxopt import isolation, ort_facts

    if not _DIAGNOSIS:
        try:
            _DIAGNOSIS.append(isolation.isolated(ort_facts.runtime_problem))
        except Exception:  # noqa: BLE001 - importing it crashed the child
            _DIAGNOSIS.append("importing onnxruntime crashes; reinstall it: pip install "
                              "--force-reinstall onnxruntime-gpu (or onnxruntime)")
    return _DIAGNOSIS[0]


def fewer_collections() -> None:
    """Let the cyclic garbage collector run less often in the command's own process.

    A run builds an IR of long-lived objects that refer to each other, so most young
    collections find nothing to free. With Python's default first threshold (700
    allocations) the collector ran 106 young and 9 middle collections while the 24-layer
    GPT-2 was optimized, 33-43 ms in all; at 10,000 it runs 6, in 16-20 ms, with the same
    peak memory (benchmarks/RESULTS.md). Only :func:`run` sets it: a program calling
    :func:`main` or the API keeps its own settings."""
    import gc

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
    import atexit
    import threading

    main_thread = threading.main_thread()
    if any(not t.daemon for t in threading.enumerate() if t is not main_thread):
        sys.exit(code)
    if hasattr(signal, "pthread_sigmask"):  # the command is over: a late signal changes nothing
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    atexit._run_exitfuncs()  # what a normal exit runs first; CPython has no public name
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: the descriptor was closed, or a printer dropped it
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(code)
