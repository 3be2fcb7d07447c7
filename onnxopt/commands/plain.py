"""Reports for a log rather than a terminal: plain lines, nothing folded or drawn.

rich renders for a terminal; where stdout is a file or a pipe (a CI log) it folds tables at 80
columns, which splits names mid-word (``decompose.Attent`` / ``ionFused.causal_``) and breaks
grep. :func:`onnxopt.commands.report.console` and ``new_table`` give these classes there: the
same calls, plain lines.
"""

from __future__ import annotations

import re
import sys


def is_terminal(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # closed
        return False


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
