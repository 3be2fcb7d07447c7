"""Running a dependency's native code where its crash cannot take onnxopt down.

onnx's shape inference and ONNX Runtime are C++; on a malformed model either can abort or
segfault (onnx's inference on a GatherND whose ``batch_dims`` is negative, ORT loading or
running one with an absurd ``batch_dims``), and a crash in the process is not an error
onnxopt can report — the user gets no file and no line. Where such code runs on what the
user handed in, it runs here: in a forked child whose result (or exception) comes back
through a pipe. A child that dies raises :class:`NativeCrash` in the parent, which each
caller turns into what it means there ("no hint", "ONNX Runtime crashes loading it").
Where ``fork`` does not exist the function runs in the process.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class NativeCrash(RuntimeError):
    """The child running native code died without an answer (a signal or an abort)."""


def isolated(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` computed in a forked child: its result (which must pickle), or the
    exception it raised, re-raised here; :class:`NativeCrash` when the child died."""
    return started(fn, *args).result()


class Child:
    """A forked child computing one call; :meth:`result` waits for it. Several children
    started before any is waited for run side by side (the safeguard's checker and ORT
    load, each single-threaded, on two cores)."""

    def __init__(self, pid: int, read_end: int) -> None:
        self._pid = pid
        self._read_end = read_end

    def result(self) -> Any:
        with os.fdopen(self._read_end, "rb") as src:
            data = src.read()
        if not data:
            _, status = os.waitpid(self._pid, 0)  # it died: how, its status says
            raise NativeCrash(f"the native code crashed ({_how(status)})")
        _reap_later(self._pid)
        ok, value = pickle.loads(data)
        if ok:
            return value
        raise value

    def cancel(self) -> None:
        """Stop the child (its answer is no longer wanted) and reap it."""
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it had finished
        os.waitpid(self._pid, 0)
        os.close(self._read_end)


class Done:
    """What :func:`started` gives where there is no ``fork``: the call, made when its result
    is asked for."""

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self._fn, self._args = fn, args

    def result(self) -> Any:
        return self._fn(*self._args)

    def cancel(self) -> None:
        """Nothing runs before :meth:`result` is asked for."""


def started(fn: Callable[..., T], *args: Any) -> Child | Done:
    """Start ``fn(*args)`` in a forked child and return at once; ``.result()`` is what
    :func:`isolated` returns. Where ``fork`` does not exist the call runs when asked for."""
    if not hasattr(os, "fork"):
        return Done(fn, args)
    _reap(block=False)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, and leave without running the parent's cleanup
        os.close(read_end)
        try:
            try:
                payload = (True, fn(*args))
            except Exception as e:  # noqa: BLE001 - every failure goes back to the parent
                payload = (False, e)
            try:
                data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as e:  # noqa: BLE001 - an unpicklable exception, told in words
                data = pickle.dumps((False, RuntimeError(f"{type(e).__name__}: {e}")))
            with os.fdopen(write_end, "wb") as out:
                out.write(data)
        finally:
            os._exit(0)
    os.close(write_end)
    return Child(pid, read_end)


# Children whose answer came back but whose exit has not been waited for yet. A child that
# has written its answer still has its memory torn down by the kernel before it is gone:
# 2-14 ms for one forked from a 450 MB parent (the 24-layer GPT-2's checks), which the
# parent would wait for with nothing left to learn. It is reaped later instead: before the
# next fork, and at exit (the console script's exit runs exit handlers too), so no child
# outlives onnxopt as a zombie.
_unreaped: list[int] = []


def _reap_later(pid: int) -> None:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # reaped already (a caller's own wait for any child)
        return
    if not done:
        _unreaped.append(pid)


def forget_children() -> None:
    """In a process forked from another: the children left to reap are the other's."""
    _unreaped.clear()


def _reap(block: bool) -> None:
    """Wait for the children left by :func:`_reap_later` (``block``: until each is gone)."""
    for pid in list(_unreaped):
        try:
            done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _unreaped.remove(pid)


atexit.register(_reap, True)


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"signal {signal.Signals(number).name}"
        except ValueError:
            return f"signal {number}"
    return f"exit code {os.WEXITSTATUS(status)}"
