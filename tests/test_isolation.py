"""Forked children for native code (onnxopt.isolation): answers, failures, crashes, and the
children's exits, which are waited for later but always waited for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from onnxopt import isolation
from onnxopt.isolation import NativeCrash, isolated, started

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="children need fork")


def _double(x: int) -> int:
    return 2 * x


def _refuse() -> None:
    raise ValueError("no")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _until_exited(pid: int) -> None:
    """Wait until ``pid`` is a zombie: exited, not yet waited for."""
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except OSError:
            return  # no /proc to look in: the reap that follows may then find it exiting
        time.sleep(0.005)


def test_answer_exception_and_crash():
    assert isolated(_double, 21) == 42
    with pytest.raises(ValueError, match="no"):
        isolated(_refuse)
    with pytest.raises(NativeCrash, match="SIGKILL"):
        isolated(_die)


def test_a_child_still_exiting_is_reaped_before_the_next_fork(monkeypatch):
    """Its answer is taken at once; its exit is waited for before the next child starts."""
    real_waitpid = os.waitpid
    calls = []

    def still_exiting_once(pid, options):
        calls.append(options)
        if options == os.WNOHANG and len(calls) == 1:
            return 0, 0
        return real_waitpid(pid, options)

    isolation._reap(block=True)  # what earlier tests left
    monkeypatch.setattr(isolation.os, "waitpid", still_exiting_once)
    child = started(_double, 1)
    pid = child._pid
    assert child.result() == 2
    assert isolation._unreaped == [pid]
    _until_exited(pid)
    second = started(_double, 2)  # reaps the first before it forks
    assert pid not in isolation._unreaped
    with pytest.raises(ChildProcessError):
        real_waitpid(pid, os.WNOHANG)  # gone: no zombie left
    assert second.result() == 4
    isolation._reap(block=True)
    assert isolation._unreaped == []


def test_no_child_outlives_the_process_as_a_zombie(tmp_path):
    """At exit every child has been waited for, even one left still exiting."""
    code = (
        "import atexit, os\n"
        "def _zombie_of(p):\n"
        "    try:\n"
        "        fields = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()\n"
        "    except OSError:\n"
        "        return False\n"
        "    return fields[0] == 'Z' and int(fields[1]) == os.getpid()\n"
        "def _count():\n"
        "    print('zombies', sum(1 for p in os.listdir('/proc') if p.isdigit() and _zombie_of(p)))\n"
        "atexit.register(_count)  # first registered, so it runs after isolation's reaper\n"
        "from onnxopt import isolation\n"
        "real = os.waitpid\n"
        "isolation.os.waitpid = lambda pid, o: (0, 0) if o == os.WNOHANG else real(pid, o)\n"
        "child = isolation.started(abs, -3)\n"
        "assert child.result() == 3 and isolation._unreaped == [child._pid]\n"
        "import time\n"
        "while not _zombie_of(child._pid):\n"
        "    time.sleep(0.005)\n"
        "_count()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not os.path.isdir("/proc"):
        pytest.skip("needs /proc to see zombies")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    assert done.stdout.split("\n")[:2] == ["zombies 1", "zombies 0"]  # before exit, at exit
