"""Rendering of reports: rich tables on a terminal, plain lines in a log (:mod:`.plain`)."""

from __future__ import annotations

import sys
import threading
from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from onnxopt.commands.plain import PlainConsole, PlainTable, is_terminal
from onnxopt.fuse import STOPPED, MatchStatus
from onnxopt.pipeline import OptimizeReport
from onnxopt.refusal import Refusal
from onnxopt.safeguard import safeguard_lines
from onnxopt.verification import VerifyReport

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

# rich is imported where something is printed to a terminal: a quiet run (a CI conversion
# job's) never prints a table, a log gets plain lines, and importing rich is about 30 ms of
# every start.


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


def stopped_rules(report: OptimizeReport) -> list[str]:
    """A warning for each rule the fuse stage stopped at its rewrite cap (a rule whose output
    matches its own pattern again): a bug in the rule, said even under ``-q``."""
    fusion = report.stages.get("fuse")
    regions = fusion.regions if fusion is not None else []
    return [f"rule {r.rule} was {r.detail} (at node {r.root}; please report this to the "
            "rule's author)" for r in regions
            if r.status == MatchStatus.REFUSED and r.code == STOPPED]


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
    """Per rule: fused, refused, partial; then the refusals grouped by rule and code, the most
    common first, each group on its own line with one of its sentences (a sentence names a
    value: it does not fit a table cell, and the same refusal at another value is another
    sentence)."""
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
    refused = [r for r in report.regions if r.status == MatchStatus.REFUSED]
    if refused:
        out.print(f"not fused ({len(refused)}; `onnxopt explain` lists partial matches too):")
        groups: dict[tuple[str, str | None], Counter] = {}
        for r in refused:
            groups.setdefault((r.rule, r.code), Counter())[r.detail] += 1
        ranked = sorted(groups.items(), key=lambda kv: -kv[1].total())
        for (rule, code), sentences in ranked[:8]:
            out.print(f"  {rule}: {_refusal_group(code, sentences)}", markup=False)
        if len(groups) > 8:
            out.print(f"  ... and {len(groups) - 8} more reasons")


def _refusal_group(code: str | None, sentences: Counter) -> str:
    """One group of refusals in a line: its most common sentence, and how many more there are
    (of that sentence, or of the same code at other values)."""
    sentence, n = sentences.most_common(1)[0]
    total = sentences.total()
    if total == n:
        return sentence + (f"  (x{n})" if n > 1 else "")
    return f"{sentence}  (and {total - 1} more {code})"


def print_selection(out: Console, report) -> None:
    """One row per (fused op, chosen kernel), then every kernel not chosen and why (the most
    common reason over those nodes)."""

    groups: dict[tuple[str, str], list] = defaultdict(list)
    for s in report.selections:
        # A node switched between regimes' kernels shows both, with the query lengths of each.
        switch = getattr(s, "switch", "")
        groups[(s.op, switch.replace("; ", "\n") if switch else s.chosen.name)].append(s)
    if not groups:
        return
    table = new_table("kernels")
    for col in ("fused op", "kernel", "nodes", "chosen by", "not chosen: why"):
        table.add_column(col, justify="right" if col == "nodes" else "left", overflow="fold")
    for (op, chosen), sels in sorted(groups.items()):
        # Per kernel, its reasons grouped by code where they are refusals (a sentence names
        # the node's values); the most common group's first sentence stands for it.
        reasons: dict[str, Counter] = defaultdict(Counter)
        said: dict[tuple[str, object], str] = {}
        for s in sels:
            for k, why in s.rejected:
                key = why.code if isinstance(why, Refusal) else why
                reasons[k.name][key] += 1
                said.setdefault((k.name, key), str(why))
        why = "\n".join(f"{name}: {said[(name, c.most_common(1)[0][0])]}"
                        for name, c in reasons.items())
        no_switch = next((s.no_switch for s in sels if getattr(s, "no_switch", None)), None)
        if no_switch is not None:
            why += f"\nno query-length switch: {no_switch}"
        basis = Counter(s.basis for s in sels).most_common(1)[0][0]
        table.add_row(op, chosen, str(len(sels)), basis, why)
    out.print(table)
    regimes = getattr(report, "regimes", [])
    if len(regimes) > 1 or any(r.kind != "prefill" or r.seq != 128 or r.batch != 1
                               for r in regimes):
        out.print("workload (kernels ranked at): " + "; ".join(map(str, regimes)), markup=False)
    for library in getattr(report, "runtime_libraries", list)():
        out.print(f"runtime: the output needs {library} (register it with ONNX Runtime's "
                  "register_custom_ops_library; `onnxopt kernels --library` prints its path)",
                  markup=False)
    for kernel, case in sorted(getattr(report, "assumptions", dict)().items()):
        out.print(f"assumes: {kernel}: {case}", markup=False)
    tuning = getattr(report, "tune_cache", None)
    if tuning:
        out.print(f"tuning: {report.tuned} signature(s) timed; decisions in {tuning}")
        for regime, signatures in getattr(report, "tuned_shapes", {}).items():
            shapes = sorted({_input_shapes(sig) for sig in signatures})
            out.print(f"tuned at {regime}: " + "; ".join(shapes), markup=False)


def _input_shapes(signature: str) -> str:
    """``AttentionFused q[1, 8, 1, 64] k[1, 8, 1025, 64] ...``: a tuning signature's op and
    input shapes (its attributes left out)."""
    parts = signature.split("|")
    shapes = [p.split("[", 1)[1].split("]")[0].replace(" ", "") for p in parts[1:]
              if "[" in p and "=" not in p.split("[", 1)[0]]
    return f"{parts[0]} " + " ".join(f"[{s}]" for s in shapes)


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
            out.print(f"kernel  {s.node}: {s.switch or s.chosen.name} ({s.basis})",
                      markup=False)
            for regime, kernel in s.regimes.items():
                out.print(f"         {regime}: {kernel}", markup=False)
            if s.no_switch is not None:
                out.print(f"         no query-length switch: {s.no_switch}", markup=False)
            for k, reason in s.rejected:
                out.print(f"         not {k.name}: {reason}", markup=False)
    print_fusion(out, result.fusion)


def print_safeguard(out: Console, summary: dict) -> None:
    """Only when something was held back: what, per rule, and why (a passing check is
    silent; the lines are the safeguard's own, :func:`onnxopt.safeguard.safeguard_lines`)."""
    for line in safeguard_lines(summary):
        out.print(line, markup=False)


_STAGE_PRINTERS = {"normalize": print_normalize, "fuse": print_fusion, "select": print_selection,
                   "safeguard": print_safeguard}


def print_verify(report: VerifyReport) -> None:
    out = console()
    table = new_table("verify")
    for col in ("output", "dtype", "max abs", "max rel", "tolerance", "result"):
        table.add_column(col, justify="right" if col.startswith(("max", "tol")) else "left")
    for o in report.outputs:
        errors = (f"{o.max_abs:.3g}", f"{o.max_rel:.3g}") if o.compared else ("-", "-")
        table.add_row(o.name, o.dtype, *errors, f"{o.tolerance:g}", o.result)
    out.print(table)
    shapes = "; ".join(", ".join(f"{k}{list(v)}" for k, v in run.items()) for run in report.runs)
    out.print(f"runs: {shapes}")
    if report.inputs_from:
        out.print(f"inputs: {', '.join(report.inputs_from)}")
    if report.long_run_skipped:
        out.print(f"long-sequence run skipped: {report.long_run_skipped}")
    if report.fails:
        out.print(report.fails)
    for line in report.notes():
        out.print(line, markup=False)
    out.print("verify: " + ("ok" if report.ok else "not verified" if report.unverified
                            else "FAILED"))
