"""A pool of fuzz workers that survives hangs and crashes.

Why: starting ``onnxopt`` as a new process per case costs ~0.4 s of imports, more
than the optimization itself on small models; so each worker builds and runs
many cases in-process, and the parent enforces the deadlines. A worker whose
onnxopt phase passes the deadline (a hang) or that dies (a crash) is killed and
replaced, and the case is classified from the parent's side, with the stack that
``faulthandler`` wrote just before the deadline. Workers are recycled every
``recycle`` cases so that state leaking between cases cannot pile up.
"""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import os
import resource
import tempfile
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import harness
from .harness import Case, Outcome

if TYPE_CHECKING:
    from typing_extensions import Self

BUILD_TIMEOUT_S = 120.0
ORT_TIMEOUT_S = 90.0
MEMORY_LIMIT = 6 << 30


def _limit_worker(tmp: str) -> None:
    os.environ["XDG_CACHE_HOME"] = tmp  # no user tuning cache read or written
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import onnxruntime

    onnxruntime.set_default_logger_severity(4)  # ORT's own error lines would flood stderr
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ValueError, OSError):
        pass


def build_case(recipe: dict[str, Any]) -> Case:
    """Turn a recipe (mutant / generated / raw bytes) into a case, in the worker."""
    kind = recipe["kind"]
    if kind == "bytes":
        return Case(recipe["case_id"], recipe["data"], recipe.get("origin", "bytes"),
                    {k: v for k, v in recipe.items() if k != "data"},
                    recipe.get("extra_files", {}))
    if kind == "mutant":
        from .cases import mutant_case

        return mutant_case(recipe)
    if kind == "generated":
        from .cases import generated_case

        return generated_case(recipe)
    raise ValueError(f"unknown recipe kind {kind!r}")


def _quiet(log_file: str) -> None:
    """ONNX Runtime's C++ logging and Python's fallback notices go to a log file, not to
    the terminal or pytest's captured output."""
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _warm_up(tmp: str) -> None:
    """Optimize a one-node model once, so onnxopt's imports are not timed in the first case."""
    import onnx.parser

    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17]>
        g (float[N, 4] x) => (float[N, 4] y) { y = Relu (x) }""")
    try:
        harness.execute(Case("warm-up", model.SerializeToString(), "warm-up"), workdir=tmp)
    except Exception:  # noqa: BLE001 - a broken onnxopt shows up in the first real case
        traceback.print_exc()  # into the worker's log file


def worker_main(conn: Connection, mode: str, stack_file: str, timeout: float) -> None:
    """Loop: receive a recipe, build the case, run it, send phases and the outcome (with the
    case's bytes when it failed, or when the recipe says ``build_only``)."""
    tmp = tempfile.mkdtemp(prefix="fuzzw_")
    _quiet(stack_file.replace("stacks_", "log_"))
    _limit_worker(tmp)
    stacks = open(stack_file, "w")  # noqa: SIM115 - lives as long as the worker
    faulthandler.enable(stacks)
    if mode == "inprocess":
        _warm_up(tmp)
    while True:
        try:
            recipe = conn.recv()
        except EOFError:
            return
        if recipe is None:
            return
        conn.send(("phase", "build"))
        try:
            case = build_case(recipe)
        except Exception:  # noqa: BLE001 - a generator that could not make a case
            conn.send(("done", Outcome(recipe["case_id"], "skipped", origin=str(recipe),
                                       recipe=_small(recipe),
                                       detail=traceback.format_exc()[-2000:])))
            continue

        def report(phase: str) -> None:
            if phase == "onnxopt" and mode == "inprocess":
                stacks.seek(0)
                stacks.truncate()
                faulthandler.dump_traceback_later(max(0.05, timeout - 0.3), exit=False,
                                                  file=stacks)
            elif phase == "ort":
                faulthandler.cancel_dump_traceback_later()
            conn.send(("phase", phase))

        if recipe.get("build_only"):
            conn.send(("done", Outcome(case.case_id, "skipped", origin=case.origin,
                                       recipe=case.recipe, size=len(case.data), data=case.data,
                                       extra_files=case.extra_files)))
            continue
        outcome = harness.execute(case, mode, report, workdir=tmp)
        faulthandler.cancel_dump_traceback_later()
        if outcome.is_bug:  # the parent keeps the bytes: it never builds cases itself
            outcome.data, outcome.extra_files = case.data, case.extra_files
        conn.send(("done", outcome))


def _small(recipe: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in recipe.items() if k not in ("data", "extra_files")}


@dataclass
class Worker:
    process: Any
    conn: Connection
    stack_file: str
    recipe: dict[str, Any] | None = None
    phase: str = ""
    phase_start: float = 0.0
    case_start: float = 0.0
    onnxopt_start: float = 0.0
    served: int = 0
    last: list[str] = field(default_factory=list)


class Pool:
    """``Pool(jobs).run(recipes)`` yields an :class:`Outcome` per recipe, in completion order."""

    def __init__(self, jobs: int = 2, mode: str = "inprocess", timeout: float = harness.TIMEOUT_S,
                 recycle: int = 150) -> None:
        self.jobs, self.mode, self.timeout, self.recycle = max(1, jobs), mode, timeout, recycle
        self.ctx = mp.get_context("spawn")
        self.tmp = tempfile.mkdtemp(prefix="fuzzpool_")
        self.workers: list[Worker] = []
        self.retry: list[dict[str, Any]] = []
        self.started = 0

    def _spawn(self) -> Worker:
        self.started += 1
        stack_file = str(Path(self.tmp) / f"stacks_{self.started}.txt")
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=worker_main, args=(child, self.mode, stack_file,
                                                          self.timeout), daemon=True)
        proc.start()
        child.close()
        return Worker(proc, parent, stack_file)

    def _kill(self, worker: Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(5)
        worker.conn.close()

    def close(self) -> None:
        for worker in self.workers:
            try:
                worker.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            worker.process.join(2)
            self._kill(worker)
        self.workers = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, recipes: Iterable[dict[str, Any]]) -> Iterator[Outcome]:
        """Yield an outcome per recipe. A case whose worker hangs or dies is run once more
        in a fresh worker first, so that a load spike or a kill from outside is not
        reported as onnxopt's hang or crash; the second attempt's outcome counts."""
        pending = iter(recipes)
        if not self.workers:
            self.workers = [self._spawn() for _ in range(self.jobs)]
        exhausted = False
        while True:
            if not exhausted or self.retry:
                exhausted = self._assign(pending) and not self.retry
            busy = [w for w in self.workers if w.recipe is not None]
            if not busy and exhausted and not self.retry:
                return
            ready = wait([w.conn for w in busy], timeout=self._next_deadline(busy))
            for worker in busy:
                outcome = self._poll(worker, worker.conn in ready)
                if outcome is not None:
                    yield outcome

    def _assign(self, pending: Iterator[dict[str, Any]]) -> bool:
        for i, worker in enumerate(self.workers):
            if worker.recipe is not None:
                continue
            if worker.served >= self.recycle or not worker.process.is_alive():
                self._kill(worker)
                worker = self.workers[i] = self._spawn()
            recipe = self.retry.pop() if self.retry else next(pending, None)
            if recipe is None:
                return True
            worker.recipe, worker.phase = recipe, "send"
            worker.phase_start = worker.case_start = time.perf_counter()
            worker.conn.send(recipe)
        return False

    def _limit(self, worker: Worker) -> float:
        if worker.phase == "onnxopt":
            return self.timeout + (0.0 if self.mode == "inprocess" else 5.0)
        if worker.phase == "ort":
            return ORT_TIMEOUT_S
        if worker.phase == "debug":  # the --debug rerun that finds where an error came from
            return self.timeout + 20.0
        return BUILD_TIMEOUT_S

    def _next_deadline(self, busy: list[Worker]) -> float:
        now = time.perf_counter()
        return max(0.01, min((w.phase_start + self._limit(w) - now for w in busy), default=1.0))

    def _poll(self, worker: Worker, readable: bool) -> Outcome | None:
        while readable:
            try:
                kind, payload = worker.conn.recv()
            except (EOFError, OSError):
                return self._lost_or_retry(worker, "crash")
            if kind == "phase":
                worker.phase, worker.phase_start = payload, time.perf_counter()
                if payload == "onnxopt":
                    worker.onnxopt_start = worker.phase_start
            else:
                worker.recipe, worker.served = None, worker.served + 1
                return payload
            readable = worker.conn.poll()
        if time.perf_counter() - worker.phase_start > self._limit(worker):
            return self._lost_or_retry(worker, "timeout")
        return None

    def _lost_or_retry(self, worker: Worker, why: str) -> Outcome | None:
        recipe = worker.recipe or {}
        outcome = self._lost(worker, why)
        if outcome.verdict in ("hang", "crash") and not recipe.get("retried"):
            self.retry.append(dict(recipe, retried=True))
            return None
        return outcome

    def _lost(self, worker: Worker, why: str) -> Outcome:
        """The worker hung or died: kill it, replace it, and say what that case did."""
        recipe, phase = worker.recipe or {}, worker.phase
        elapsed = time.perf_counter() - worker.case_start
        self._kill(worker)
        code = worker.process.exitcode
        stack = Path(worker.stack_file).read_text(errors="replace") if Path(
            worker.stack_file).exists() else ""
        index = self.workers.index(worker)
        self.workers[index] = self._spawn()
        outcome = Outcome(recipe.get("case_id", "?"), "skipped", recipe=_small(recipe),
                          origin=recipe.get("origin", ""), total_seconds=elapsed,
                          detail=f"worker exit code {code}\n{stack}")
        if phase == "onnxopt":
            outcome.verdict = "hang" if why == "timeout" else "crash"
            outcome.seconds = time.perf_counter() - worker.onnxopt_start
            where = hang_location(stack)
            outcome.signature = f"{outcome.verdict} @ {where or '?'}"
        else:
            outcome.message = f"{why} in the {phase} phase (not onnxopt's)"
        outcome.problems = [outcome.signature] if outcome.signature else []
        outcome.verdicts = [outcome.verdict]
        return outcome


def hang_location(stack: str) -> str:
    """'file.py:function' of the innermost onnxopt frame of the main thread's stack."""
    lines = [ln for ln in stack.splitlines() if "/onnxopt/" in ln and "/tests/" not in ln]
    if not lines:
        return ""
    first = lines[0].strip()  # faulthandler lists the innermost frame first
    parts = first.split('"')
    path = parts[1].split("/onnxopt/")[-1] if len(parts) > 1 else first
    function = first.rsplit(" in ", 1)[-1]
    return f"{path}:{function}"
