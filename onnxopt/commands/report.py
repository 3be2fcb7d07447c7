"""Terminal rendering of reports: rich tables on a terminal, plain lines in a log; stage
progress as a spinner on a terminal, a line per long stage on stderr otherwise."""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from onnxopt.fuse import STOPPED
from onnxopt.pipeline import OptimizeReport
from onnxopt.verification import VerifyReport

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

# rich is imported where something is printed to a terminal: a quiet run (a CI conversion
# job's) never prints a table, a log gets plain lines, and importing rich is about 30 ms of
# every start.


def is_terminal(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # closed
        return False


def import_rich_meanwhile() -> None:
    """Import rich on a thread of its own, now: the caller is about to wait on child
    processes (the safeguard's checks), with the interpreter idle and a core free once the
    checker's child is done. Importing it takes 30-60 ms, and the report is printed right after
    the checks; this import then waits only for whatever part is not done yet. Only for a
    terminal: a log gets plain lines, without rich."""
    if is_terminal(sys.stdout):
        threading.Thread(target=_import_rich, name="onnxopt-import-rich", daemon=True).start()


def _import_rich() -> None:
    import rich.console
    import rich.table  # noqa: F401 - imported for the report printed after the checks


def console() -> Console | PlainConsole:
    """Where reports are printed: rich on a terminal; plain lines when stdout is a file or a
    pipe (a CI log), which rich would fold at 80 columns, splitting names mid-word."""
    if not is_terminal(sys.stdout):
        return PlainConsole()
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def new_table(title: str) -> Table | PlainTable:
    if not is_terminal(sys.stdout):
        return PlainTable(title)
    from rich.table import Table

    return Table(title=title, show_edge=False, title_justify="left")


class PlainTable:
    """A table for a log: the title, the header and each row on lines of their own, columns
    two spaces apart and padded, nothing folded or drawn. A cell of several lines (a list of
    reasons) continues on the lines below, in its column."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.headers: list[str] = []
        self.rows: list[list[str]] = []

    def add_column(self, header: str, **_style) -> None:
        self.headers.append(header)

    def add_row(self, *cells, **_style) -> None:
        self.rows.append([str(c) for c in cells])

    def lines(self) -> list[str]:
        rows = [[cell.split("\n") for cell in row] for row in [self.headers, *self.rows]]
        widths = [max((len(line) for row in rows for line in row[i]), default=0)
                  for i in range(len(self.headers))]
        out = [self.title]
        for row in rows:
            for k in range(max(len(cell) for cell in row)):
                parts = [(cell[k] if k < len(cell) else "").ljust(width)
                         for cell, width in zip(row, widths)]
                out.append("  ".join(parts).rstrip())
        return out


# The styles this module's own markup uses; a plain line drops them.
_MARKUP = re.compile(r"\[/?(?:bold|green|red|yellow)?\]")


class PlainConsole:
    """What :func:`console` gives when stdout is not a terminal: ``print`` as rich's, in plain
    lines (no colour, no wrapping)."""

    is_terminal = False
    width = 0  # nothing is folded at any width

    def print(self, what: object = "", *, markup: bool = True, **_style) -> None:
        if isinstance(what, PlainTable):
            text = "\n".join(what.lines())
        else:
            text = _MARKUP.sub("", str(what)) if markup else str(what)
        if sys.stdout is not None:  # None: descriptor 1 was closed (``>&-``), or a printer dropped it
            sys.stdout.write(text + "\n")


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


def stopped_rules(report: OptimizeReport) -> list[str]:
    """A warning for each rule the fuse stage stopped at its rewrite cap (a rule whose output
    matches its own pattern again): a bug in the rule, said even under ``-q``."""
    fusion = report.stages.get("fuse")
    regions = fusion.regions if fusion is not None else []
    return [f"rule {r.rule} was {r.detail} (at node {r.root}; please report this to the "
            "rule's author)" for r in regions
            if r.status == "refused" and r.detail.startswith(f"{STOPPED} ")]


def print_optimize(report: OptimizeReport, output: str) -> None:
    out = console()
    before, after = report.nodes_before, report.nodes_after
    table = new_table("nodes by op")
    table.add_column("op")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    ops = sorted(set(before) | set(after), key=lambda op: (-(before[op] + after[op]), op))
    changed = [op for op in ops if before[op] != after[op]]
    shown = changed + [op for op in ops if op not in changed][: max(0, 12 - len(changed))]
    for op in shown:
        table.add_row(op, str(before[op]), str(after[op]))
    hidden = len(ops) - len(shown)
    if hidden:
        table.add_row(f"({hidden} more unchanged)", "", "")
    table.add_row("total", str(sum(before.values())), str(sum(after.values())), style="bold")
    out.print(table)
    for name, summary in report.stages.items():
        printer = _STAGE_PRINTERS.get(name)
        if printer is not None:
            printer(out, summary)
    times = "  ".join(f"{k} {v * 1000:.0f} ms" for k, v in report.stage_seconds.items())
    out.print(f"stages: {times}")
    out.print(f"wrote {output}", markup=False)


def print_normalize(out: Console, summary: dict[str, int]) -> None:
    """What each pass changed, by the name the JSON report gives it (snake_case)."""
    if summary:
        out.print("normalize: " + ", ".join(f"{'_'.join(k.split())} {v}"
                                            for k, v in summary.items()), markup=False)


def print_fusion(out: Console, report) -> None:
    """Per rule: fused, refused, partial; then the refusal reasons, each on its own line
    (a reason is a sentence naming a value: it does not fit a table cell)."""
    summary = report.summary()
    if not summary:
        out.print("fusion: no candidate regions")
        return
    table = new_table("fusion")
    for col in ("rule", "fused", "refused", "partial"):
        table.add_column(col, justify="left" if col == "rule" else "right")
    for rule, entry in summary.items():
        table.add_row(rule, str(entry["fused"]), str(entry["refused"]), str(entry["partial"]))
    out.print(table)
    refused = [r for r in report.regions if r.status == "refused"]
    if refused:
        out.print(f"not fused ({len(refused)}; `onnxopt explain` lists partial matches too):")
        counts: dict[tuple[str, str], int] = {}
        for r in refused:
            counts[(r.rule, r.detail)] = counts.get((r.rule, r.detail), 0) + 1
        for (rule, detail), n in sorted(counts.items(), key=lambda kv: -kv[1])[:8]:
            out.print(f"  {rule}: {detail}" + (f"  (x{n})" if n > 1 else ""), markup=False)
        if len(counts) > 8:
            out.print(f"  ... and {len(counts) - 8} more reasons")


def print_selection(out: Console, report) -> None:
    """One row per (fused op, chosen kernel), then every kernel not chosen and why (the most
    common reason over those nodes)."""

    groups: dict[tuple[str, str], list] = defaultdict(list)
    for s in report.selections:
        groups[(s.op, s.chosen.name)].append(s)
    if not groups:
        return
    table = new_table("kernels")
    for col in ("fused op", "kernel", "nodes", "chosen by", "not chosen: why"):
        table.add_column(col, justify="right" if col == "nodes" else "left", overflow="fold")
    for (op, chosen), sels in sorted(groups.items()):
        reasons: dict[str, Counter] = defaultdict(Counter)
        for s in sels:
            for k, why in s.rejected:
                reasons[k.name][why] += 1
        why = "\n".join(f"{name}: {c.most_common(1)[0][0]}" for name, c in reasons.items())
        basis = Counter(s.basis for s in sels).most_common(1)[0][0]
        table.add_row(op, chosen, str(len(sels)), basis, why)
    out.print(table)
    tuning = getattr(report, "tune_cache", None)
    if tuning:
        out.print(f"tuning: {report.tuned} signature(s) timed; decisions in {tuning}")


def print_explain(result) -> None:
    out = console()
    regions = result.fusion.regions
    if not regions:
        out.print("no candidate regions")
    for r in regions:
        mark = {"fused": "[green]fused[/]", "refused": "[red]refused[/]",
                "partial": "[yellow]partial[/]"}[r.status]
        out.print(f"{mark}  {r.rule:<12} at {r.root}  ({r.nodes} nodes)")
        out.print(f"         {r.detail}", markup=False)
    if result.selection is not None:
        for s in result.selection.selections:
            out.print(f"kernel  {s.node}: {s.chosen.name} ({s.basis})")
            for k, reason in s.rejected:
                out.print(f"         not {k.name}: {reason}", markup=False)
    print_fusion(out, result.fusion)


def print_safeguard(out: Console, summary: dict) -> None:
    """Only when something was held back: what, and why (a passing check is silent)."""
    if summary.get("checks") == "passed":
        return
    if str(summary.get("checks", "")).startswith("not loaded"):
        out.print(f"safeguard: {summary['checks']}", markup=False)
        return
    fallback = summary.get("fallback")
    what = {"partial": "held back " + ", ".join(summary.get("held_back", [])),
            "round trip": "wrote the model without any rewrite (a plain round trip)",
            "original": "wrote the input unchanged"}.get(fallback, "")
    out.print(f"safeguard: {summary.get('problem')}; {what}", markup=False)


_STAGE_PRINTERS = {"normalize": print_normalize, "fuse": print_fusion, "select": print_selection,
                   "safeguard": print_safeguard}


def register_stage_printer(stage: str, printer) -> None:
    _STAGE_PRINTERS[stage] = printer


def print_verify(report: VerifyReport) -> None:
    out = console()
    table = new_table("verify")
    for col in ("output", "dtype", "max abs", "max rel", "tolerance", "result"):
        table.add_column(col, justify="right" if col.startswith(("max", "tol")) else "left")
    for o in report.outputs:
        result = "bitwise equal" if o.bitwise else ("ok" if o.ok else "MISMATCH")
        table.add_row(o.name, o.dtype, f"{o.max_abs:.3g}", f"{o.max_rel:.3g}", f"{o.tolerance:g}",
                      result)
    out.print(table)
    shapes = "; ".join(", ".join(f"{k}{list(v)}" for k, v in run.items()) for run in report.runs)
    out.print(f"runs: {shapes}")
    if report.inputs_from:
        out.print(f"inputs: {', '.join(report.inputs_from)}")
    if report.long_run_skipped:
        out.print(f"long-sequence run skipped: {report.long_run_skipped}")
    if report.fails:
        out.print(report.fails)
    out.print("verify: " + ("ok" if report.ok else "FAILED"))
