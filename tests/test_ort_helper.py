"""The ORT helper: calls answered from a process of its own, a crash in one call told as
NativeCrash without losing the helper, the parent never loading ONNX Runtime on the
optimize path, and every way the helper cannot serve falling back to a child of the
caller's own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from onnxopt import ort_helper
from onnxopt.isolation import NativeCrash, isolated

ROOT = os.path.join(os.path.dirname(__file__), "..")
MODELS = os.path.join(ROOT, "models")


def _python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter at the checkout's root (it imports this module)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, cwd=ROOT, timeout=timeout)


def _pid() -> int:
    return os.getpid()


def _parent_pid() -> int:
    return os.getppid()


def _refuse(word: str) -> None:
    raise ValueError(f"no {word}")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


class _Unreadable:
    """Pickles in the child and is rebuilt in the helper, but not in the helper's owner."""

    def __reduce__(self):
        return (_rebuilt_outside_the_owner, ())


def _rebuilt_outside_the_owner() -> _Unreadable:
    if ort_helper._owner == os.getpid():
        raise ValueError("not here")
    return _Unreadable()


def _unreadable() -> _Unreadable:
    return _Unreadable()


def _ort_loaded_here() -> bool:
    return "onnxruntime.capi._pybind_state" in sys.modules


def test_a_call_runs_in_a_child_of_the_helper_where_ort_is_loaded():
    ort_helper.start()
    helper = ort_helper._helper
    assert helper is not None and helper.alive
    assert ort_helper.call(_parent_pid) == helper.pid  # the child's parent is the helper
    assert ort_helper.call(_pid) not in (os.getpid(), helper.pid)
    assert ort_helper.call(_ort_loaded_here)


def test_ask_runs_in_the_helper_itself():
    ort_helper.start()
    assert ort_helper.ask(_pid) == ort_helper._helper.pid
    with pytest.raises(ValueError, match="no probe"):
        ort_helper.ask(_refuse, "probe")


def test_a_crash_of_what_the_helper_runs_itself_is_told_by_a_child_of_the_callers():
    """The helper is gone with the call; the call runs again in a child of the caller's own,
    whose death is the NativeCrash, and later calls run in such children."""
    code = textwrap.dedent("""
        import os
        from onnxopt import ort_helper
        from onnxopt.isolation import NativeCrash
        from tests.test_ort_helper import _die, _parent_pid
        ort_helper.start()
        try:
            ort_helper.ask(_die)
        except NativeCrash as e:
            print("crash:", e)
        assert not ort_helper._helper.alive
        assert ort_helper.call(_parent_pid) == os.getpid()
        assert ort_helper.ask(_parent_pid) == os.getpid()
    """)
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "crash: the native code crashed (signal SIGSEGV)"


def test_an_exception_comes_back_as_itself():
    with pytest.raises(ValueError, match="no answer"):
        ort_helper.call(_refuse, "answer")


@pytest.mark.parametrize(("fn", "error", "says"), [
    (_die, NativeCrash, "SIGSEGV"),  # a crash of the child is told as how it died
    (_unreadable, RuntimeError, "cannot be read"),  # an answer the caller cannot rebuild
])
def test_a_failed_call_leaves_the_helper_serving(fn, error, says):
    ort_helper.start()
    pid = ort_helper._helper.pid
    with pytest.raises(error, match=says):
        ort_helper.call(fn)
    assert ort_helper.call(_parent_pid) == pid


def test_calls_begun_together_are_answered_in_order():
    first = ort_helper.submit(_refuse, "first")
    second = ort_helper.submit(_parent_pid)
    assert second.result() == ort_helper._helper.pid  # read past the first one's answer
    with pytest.raises(ValueError, match="no first"):
        first.result()


def _apply(fn):
    return fn()


def test_arguments_that_do_not_pickle_run_in_the_callers_own_child():
    here = os.getpid()
    assert ort_helper.call(_apply, lambda: os.getppid()) == here
    assert ort_helper.call(lambda: os.getppid()) == here


def _length(data) -> tuple[int, int]:
    return os.getppid(), len(data)


def test_a_models_bytes_stay_with_a_child_of_the_callers_own():
    """Arguments carrying a model's bytes are shared by a fork, not copied through the socket;
    small ones go to the helper."""
    import onnx

    ort_helper.start()
    here, helper = os.getpid(), ort_helper._helper.pid
    large = bytes(ort_helper._SENT_MAX_BYTES + 1)
    assert ort_helper.call(_length, large) == (here, len(large))
    assert ort_helper.call(_length, memoryview(large)) == (here, len(large))
    assert ort_helper.call(_length, b"small") == (helper, 5)
    proto = onnx.helper.make_tensor("t", onnx.TensorProto.UINT8, [len(large)], large, raw=True)
    assert ort_helper.call(_parent_pid_of, proto) == here
    assert ort_helper.call(_parent_pid_of, onnx.TensorProto(name="t")) == helper


def _parent_pid_of(_message) -> int:
    return os.getppid()


def test_a_forked_child_of_the_owner_does_not_use_its_socket():
    """A child forked from the owner (as isolation forks) runs calls in children of its own."""
    assert isolated(_call_from_a_child) == "own child"


def _call_from_a_child() -> str:
    parent = ort_helper.call(_parent_pid)
    return "own child" if parent == os.getpid() else f"parent {parent}"


def test_a_helper_killed_from_outside_is_replaced_by_the_callers_children():
    code = textwrap.dedent("""
        import os, signal
        from onnxopt import ort_helper
        from tests.test_ort_helper import _parent_pid
        ort_helper.start()
        helper = ort_helper._helper.pid
        assert ort_helper.call(_parent_pid) == helper
        os.kill(helper, signal.SIGKILL)
        assert ort_helper.call(_parent_pid) == os.getpid()  # a child of this process's own
        assert ort_helper.call(_parent_pid) == os.getpid()
        print("ok")
    """)
    out = _python(code)
    assert out.stdout.strip() == "ok", out.stderr


def test_without_a_socket_calls_run_in_the_callers_own_children(monkeypatch):
    def refuse():
        raise OSError("no sockets here")

    monkeypatch.setattr(ort_helper.socket, "socketpair", refuse)
    monkeypatch.setattr(ort_helper, "_helper", None)
    monkeypatch.setattr(ort_helper, "_owner", -1)
    assert ort_helper.call(_parent_pid) == os.getpid()
    assert ort_helper.ask(_parent_pid) == os.getpid()
    assert ort_helper._helper is None


def test_an_interrupt_halfway_through_an_answer_stops_the_helper():
    """The stream cannot be trusted after a frame read halfway (Ctrl-C in a notebook): the
    helper is stopped and later calls run in the caller's own children."""
    code = textwrap.dedent("""
        import os
        from onnxopt import ort_helper
        from tests.test_ort_helper import _parent_pid
        ort_helper.start()
        helper = ort_helper._helper
        real = ort_helper._receive_frame

        def interrupted(sock):
            real(sock)
            raise KeyboardInterrupt

        ort_helper._receive_frame = interrupted
        try:
            ort_helper.call(_parent_pid)
        except KeyboardInterrupt:
            pass
        ort_helper._receive_frame = real
        assert not helper.alive
        assert ort_helper.call(_parent_pid) == os.getpid()
        print("ok")
    """)
    out = _python(code)
    assert out.stdout.strip() == "ok", out.stderr


def test_the_helper_keeps_no_descriptor_of_its_parents():
    """A pipe's write end the parent held when the helper was forked: once the parent closes
    it, its reader sees the end (the helper does not hold it open)."""
    code = textwrap.dedent("""
        import os, select
        from onnxopt import ort_helper
        from tests.test_ort_helper import _parent_pid
        read_end, write_end = os.pipe()
        ort_helper.start()
        assert ort_helper.call(_parent_pid) == ort_helper._helper.pid  # it has started
        os.close(write_end)
        ready, _, _ = select.select([read_end], [], [], 20)
        print("end" if ready and os.read(read_end, 1) == b"" else "held open")
    """)
    out = _python(code)
    assert out.stdout.strip() == "end", out.stderr


def test_the_programs_signal_handlers_do_not_run_in_the_helper(tmp_path):
    marker = tmp_path / "handled"
    code = textwrap.dedent(f"""
        import os, signal
        from onnxopt import ort_helper
        from tests.test_ort_helper import _parent_pid
        signal.signal(signal.SIGTERM, lambda *_: open({str(marker)!r}, "w").close())
        ort_helper.start()
        helper = ort_helper._helper.pid
        assert ort_helper.call(_parent_pid) == helper
        os.kill(helper, signal.SIGTERM)
        _, status = os.waitpid(helper, 0)
        print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM)
    """)
    out = _python(code)
    assert out.stdout.strip() == "True", out.stderr
    assert not marker.exists()


def test_without_fork_a_call_runs_here(monkeypatch):
    monkeypatch.delattr(os, "fork")
    monkeypatch.setattr(ort_helper, "_helper", None)
    monkeypatch.setattr(ort_helper, "_owner", -1)
    assert ort_helper.call(_pid) == os.getpid()
    assert ort_helper._helper is None


def test_the_helper_ends_with_its_parent():
    code = "from onnxopt import ort_helper; ort_helper.start(); print(ort_helper._helper.pid)"
    out = _python(code)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.05)
    assert not _running(pid)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next(line for line in f if line.startswith("State:"))
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "Z" not in state.split()[1]  # a zombie has ended; its reaper is not ours


def test_optimizing_never_loads_ort_in_the_parent(tmp_path):
    """The stages' facts and mask probes and the checks are all answered by the helper."""
    model = os.path.join(MODELS, "gpt2.dynamo.onnx")
    code = textwrap.dedent(f"""
        import sys
        from onnxopt.cli import main
        assert main(["optimize", {model!r}, "-o", {str(tmp_path / "out.onnx")!r},
                     "--target", "cpu", "-q"]) == 0
        print("onnxruntime.capi._pybind_state" in sys.modules)
    """)
    out = _python(code, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
