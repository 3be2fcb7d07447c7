"""ONNX Runtime in a process of its own, loaded while the parent imports the model.

Loading ORT's module takes 25-40 ms of CPU, and probing the IR versions it reads two small
sessions more. During the stages the parent needs ORT for little: its version, the highest
IR version it loads, and the mask probes; after them, the load check. On a model of a few
hundred nodes those fixed costs were a third of the stages (benchmarks/RESULTS.md). Here a
helper, forked as a command starts, loads ORT on the other core while the parent imports the
stages, and answers those calls; the parent itself never loads ORT on that path.

The helper is a forked child, so ORT's native code on the user's model never runs in
onnxopt's own process. A call that loads or runs a whole model (:func:`call`: the load
check, verification) runs in a child forked from the helper, in turn
(:func:`onnxopt.isolation.isolated`), which keeps the helper small and alive whatever the
call does; its crash comes back as :class:`~onnxopt.isolation.NativeCrash` saying how the
child died. A call so small that the fork would be most of its cost (:func:`ask`: the mask
probe, the facts) is run by the helper itself: where it crashes the helper, the call runs
again in a child of the caller's own, which reports the crash the same way.

The helper was forked before the model was read: nothing of the parent's later state is
there. A call is a function importable by name and arguments that pickle. Where there is no
``fork``, in a process other than the one that started the helper (a forked child of
onnxopt's), where the arguments do not pickle or carry a model's bytes (a fork shares them,
the socket would copy them), or once the helper is gone, a call runs as
:func:`onnxopt.isolation.started` runs it, in a child forked from the caller.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from onnxopt import isolation
from onnxopt.isolation import Child, Done, isolated, started
from onnxopt.ort_facts import RuntimeFacts, find_facts

T = TypeVar("T")

_LENGTH = struct.Struct("<Q")
_SENT_MAX_BYTES = 1 << 20  # an argument larger than this stays with a fork (_carries_bytes)
_HERE, _ISOLATED = "here", "isolated"  # how the helper runs a call: itself, or in a child
# The modules whose functions a run hands the helper (the mask probe, the load checks).
_CALLED_FROM = ("onnxopt.legality.mask", "onnxopt.verification.loadable")


def start() -> None:
    """Fork the helper now, unless it runs already (or there is no ``fork``): ORT then loads
    while the caller goes on. Calls start it themselves where nothing did."""
    with _lock:
        _running()


def call(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a child forked from the helper (where ORT is loaded): its result, or
    the exception it raised; :class:`~onnxopt.isolation.NativeCrash` where the child died."""
    return submit(fn, *args).result()


def ask(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` run by the helper itself, for a call so small that a fork would be most
    of its cost (a mask probe: a session on a few nodes and six runs, 5 ms, against 4-14 ms
    for a fork and exit on these machines). The helper is a forked child of the caller's too:
    where the call crashes it, the helper is gone, and the call runs again in a child of the
    caller's own, whose death is the :class:`~onnxopt.isolation.NativeCrash` the caller sees;
    later calls all run in such children."""
    return _begin(_HERE, fn, args).result()


def submit(fn: Callable[..., Any], *args: Any) -> Reply | Child | Done:
    """:func:`call` begun, not waited for: ``.result()`` waits. The caller may start other
    work (a child of its own) before it asks."""
    return _begin(_ISOLATED, fn, args)


def facts() -> RuntimeFacts:
    """ORT's version and the highest IR version it loads, asked of the helper once (it found
    them right after loading ORT); found here where there is no helper."""
    global _facts
    if _facts is None:
        _facts = ask(find_facts)
    return _facts


def _begin(kind: str, fn: Callable[..., Any], args: tuple) -> Reply | Child | Done:
    with _lock:
        helper = _running()
        request = None if helper is None else _request(kind, fn, args)
        if request is None:  # no helper, or arguments it should not get: a child of ours
            return started(fn, *args)
        return helper.send(request, fn, args)


class Reply:
    """The helper's answer to one call, read when asked for (answers come back in order)."""

    __slots__ = ("_args", "_done", "_fn", "_helper", "_value")

    def __init__(self, helper: _Helper, fn: Callable[..., Any], args: tuple) -> None:
        self._helper, self._fn, self._args = helper, fn, args
        self._done = False
        self._value: tuple[bool, Any] = (False, None)

    def result(self) -> Any:
        with _lock:
            while not self._done:
                if not self._helper.receive_next():
                    # The helper itself is gone (a call it ran itself crashed it, or it was
                    # killed): the call runs in a child of this process's own.
                    return isolated(self._fn, *self._args)
        ok, value = self._value
        if ok:
            return value
        raise value

    def _answer(self, payload: tuple[bool, Any]) -> None:
        self._value, self._done = payload, True


class _Helper:
    """The parent's end: the helper's pid, the socket, the calls not yet answered."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid, self.sock = pid, sock
        self.waiting: deque[Reply] = deque()
        self.alive = True

    def send(self, request: bytes, fn: Callable[..., Any], args: tuple) -> Reply:
        """Send one call (``request``: it pickled). The answers before it are read first: the
        helper answers one call at a time, and a long request must not meet an answer the
        parent is not reading."""
        while self.waiting and self.receive_next():
            pass
        reply = Reply(self, fn, args)
        if self.alive:
            try:
                _send_frame(self.sock, request)
                self.waiting.append(reply)
                return reply
            except OSError:
                self.close()
            except BaseException:  # Ctrl-C with a frame half sent: the stream is lost
                self.close(stop=True)
                raise
        return reply  # answered by its own result(): the helper is gone

    def receive_next(self) -> bool:
        """Read the next answer into the call that waits for it; False where the helper is
        gone (every waiting call then runs in the caller's own child)."""
        if not self.waiting:
            return False
        try:
            data = _receive_frame(self.sock)
        except OSError:
            data = None
        except BaseException:  # Ctrl-C with a frame half read: the stream is lost
            self.close(stop=True)
            raise
        if data is None:
            self.close()
            return False
        try:
            payload = pickle.loads(data)
        except Exception as e:  # noqa: BLE001 - an answer this process cannot rebuild
            payload = (False, RuntimeError(f"the ORT helper's answer cannot be read ({e})"))
        self.waiting.popleft()._answer(payload)
        return True

    def close(self, stop: bool = False) -> None:
        """Let the helper go (``stop``: now, whatever it is doing) and reap it; calls from
        here on run in the caller's own children."""
        if not self.alive:
            return
        self.alive = False
        self.sock.close()
        if stop:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it had ended
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass  # reaped by a caller's own wait for any child


_lock = threading.RLock()
_helper: _Helper | None = None
_owner = -1  # the process that forked it: only that one talks to it
_facts: RuntimeFacts | None = None


def _request(kind: str, fn: Callable[..., Any], args: tuple) -> bytes | None:
    """The call pickled for the helper, or ``None`` where it does not pickle (a function not
    importable by name, an argument of the caller's own making) or carries a model's bytes
    (:func:`_carries_bytes`)."""
    if _carries_bytes(args):
        return None
    try:
        return pickle.dumps((kind, fn, args), pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - any failure to pickle: the caller's own child runs it
        return None


def _carries_bytes(args: tuple) -> bool:
    """Whether an argument is bytes or a protobuf message over :data:`_SENT_MAX_BYTES`: a
    model checked from its bytes, a proto to verify. A child forked from the caller shares
    them; the socket would copy them four times over (pickled, sent, received, unpickled). The
    24-layer GPT-2's load check from its 78 MB of bytes took 1.0-1.5 s through the helper
    against 0.74-0.83 s in a child of the caller's, ORT's own load included."""
    for a in args:
        size = a.nbytes if isinstance(a, memoryview) else (
            len(a) if isinstance(a, (bytes, bytearray)) else None)
        if size is None and callable(getattr(a, "ByteSize", None)):
            size = a.ByteSize()
        if size is not None and size > _SENT_MAX_BYTES:
            return True
    return False


def _running() -> _Helper | None:
    """The helper (forked now if there is none), or ``None`` where it cannot serve here."""
    global _helper, _owner
    if not hasattr(os, "fork") or not hasattr(socket, "socketpair"):
        return None
    if _helper is not None and _owner == os.getpid():
        return _helper if _helper.alive else None
    if _owner != -1 and _owner != os.getpid():
        return None  # a forked child of the owner: the socket is the owner's
    try:
        parent_end, helper_end = socket.socketpair()
    except OSError:
        return None  # no socket to be had here (a sandbox): calls run in children of ours
    try:
        pid = os.fork()
    except OSError:  # no process to be had (a limit on processes, memory)
        parent_end.close()
        helper_end.close()
        return None
    if pid == 0:
        parent_end.close()
        _serve(helper_end)  # never returns
    helper_end.close()
    _helper, _owner = _Helper(pid, parent_end), os.getpid()
    return _helper


def _serve(sock: socket.socket) -> None:
    """The helper's life: load ORT, find its facts, then answer calls until the parent's end
    closes (the parent exited, or was killed)."""
    try:
        _close_inherited(sock.fileno())
        _default_signals()
        isolation.forget_children()  # the parent's children are not the helper's to reap
        _prepare()
        while (data := _receive_frame(sock)) is not None:
            try:
                kind, fn, args = pickle.loads(data)
                value = fn(*args) if kind == _HERE else isolated(fn, *args)
                payload = (True, value)
            except Exception as e:  # noqa: BLE001 - every failure goes back to the parent
                payload = (False, e)
            try:
                out = pickle.dumps(payload, pickle.HIGHEST_PROTOCOL)
            except Exception as e:  # noqa: BLE001 - an unpicklable answer, told in words
                out = pickle.dumps((False, RuntimeError(f"{type(e).__name__}: {e}")))
            _send_frame(sock, out)
    finally:
        # Whatever ended it (the parent's end closed, Ctrl-C to the process group), the parent
        # sees the socket close and runs what it asks next in children of its own.
        os._exit(0)


def _prepare() -> None:
    """What every run asks of the helper, done before it is asked: ORT loaded and its facts
    found, and the modules whose functions it runs imported."""
    find_facts()
    for name in _CALLED_FROM:
        importlib.import_module(name)


def _close_inherited(keep: int) -> None:
    """Close what the helper inherited but the socket and the standard streams: a pipe's
    write end kept open here (a program's own subprocess, another thread's child) would hold
    back the end of what its reader waits for as long as the helper lives."""
    try:
        open_fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: the descriptors a process usually has
        open_fds = list(range(3, 1024))
    for fd in open_fds:
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass  # not open (the listing's own descriptor, closed already)


# Signals whose handlers a program embedding onnxopt may have set: in the helper, which lives
# as long as that program, they do what they do by default (a handler of the program's could
# clean up its files), and Ctrl-C ends the helper as it ends the program.
_RESET_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def _default_signals() -> None:
    for name in _RESET_SIGNALS:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _send_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(data)))
    sock.sendall(data)


def _receive_frame(sock: socket.socket) -> bytearray | None:
    """One frame, or ``None`` at the end of the stream (the other end closed)."""
    head = _receive_exactly(sock, _LENGTH.size)
    return None if head is None else _receive_exactly(sock, _LENGTH.unpack(head)[0])


def _receive_exactly(sock: socket.socket, size: int) -> bytearray | None:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return buffer
