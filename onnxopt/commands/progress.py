"""Stage progress: what the command is doing while it runs, and how long each stage took.

On a terminal a spinner names the stage; on any other stderr (a CI log) a stage that runs
long gets a line; under ``-q`` nothing is shown. Every stage is timed in every case: the
report's stage times come from here for what the pipeline does not time itself.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

from onnxopt.commands.plain import is_terminal


class StageClock:
    """The stage running now: ``clock(name)`` ends the one before and starts ``name``.

    Every stage is timed (``seconds``, summed by name), shown or not: the report's stage
    times come from here for what the pipeline does not time itself (the checks, the
    weights' write, verification). ``show`` is told as stages start and end."""

    def __init__(self, show: _StageDisplay | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self._show = show
        self._stage: str | None = None
        self._start = 0.0

    def __call__(self, name: str) -> None:
        self.end()
        self._stage, self._start = name, time.perf_counter()
        if self._show is not None:
            self._show.start(name)

    def end(self) -> None:
        if self._stage is None:
            return
        elapsed = time.perf_counter() - self._start
        self.seconds[self._stage] = self.seconds.get(self._stage, 0.0) + elapsed
        if self._show is not None:
            self._show.end(self._stage, elapsed)
        self._stage = None

    def add_to(self, stage_seconds: dict[str, float]) -> None:
        """Add the stages ``stage_seconds`` lacks (the pipeline's own times stand)."""
        for name, seconds in self.seconds.items():
            stage_seconds.setdefault(name, seconds)


class _StageDisplay:
    def start(self, name: str) -> None: ...

    def end(self, name: str, seconds: float) -> None: ...


# A stage gets its line in a log once it has run this long: the long ones (the checks and the
# verification of a large model, a kernel build) are said while they run; a run whose stages
# are all quick leaves stderr as it was, so an error is still the one line there.
LINE_AFTER_SECONDS = 2.0


class _StageLines(_StageDisplay):
    """One line per long stage on stderr, for a log: ``onnxopt: checks…`` once the stage has
    run ``LINE_AFTER_SECONDS``, its seconds at the end of the same line when it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._starts = 0
        self._current: int | None = None  # which start is running (None: no stage is)
        self._open = False  # a line was begun and awaits its seconds

    def start(self, name: str) -> None:
        with self._lock:
            self._starts += 1
            self._current = stage = self._starts
        if LINE_AFTER_SECONDS <= 0:
            self._begin(name, stage)
            return
        self._timer = threading.Timer(LINE_AFTER_SECONDS, self._begin, (name, stage))
        self._timer.daemon = True  # never what the process waits for at exit
        self._timer.start()

    def _begin(self, name: str, stage: int) -> None:
        with self._lock:
            if stage != self._current:  # it ended while the timer was firing
                return
            sys.stderr.write(f"onnxopt: {name}\u2026")
            sys.stderr.flush()
            self._open = True

    def end(self, name: str, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        with self._lock:
            self._current = None  # a timer firing late writes nothing
            if self._open:
                sys.stderr.write(f" {seconds:.1f} s\n")
                sys.stderr.flush()
                self._open = False


class _Spinner(_StageDisplay):
    """rich's spinner on a terminal, with the stage's name and its time so far."""

    def __init__(self, bar) -> None:
        self.bar = bar
        self.task = bar.add_task("starting", total=None)

    def start(self, name: str) -> None:
        self.bar.reset(self.task, description=name)


@contextlib.contextmanager
def stage_progress(enabled: bool = True) -> Iterator[StageClock]:
    """Yield a :class:`StageClock` for the command's stages: a spinner on an interactive
    stderr, a line per long stage on any other, nothing unless ``enabled`` (``-q``); timed in
    every case."""
    if not enabled:
        display = None
    elif not is_terminal(sys.stderr):
        display = _StageLines()
    else:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as bar:
            clock = StageClock(_Spinner(bar))
            try:
                yield clock
            finally:
                clock.end()
        return
    clock = StageClock(display)
    try:
        yield clock
    finally:
        clock.end()
