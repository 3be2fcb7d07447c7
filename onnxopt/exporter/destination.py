"""Where onnxopt may write: every output path checked before any work starts.

A command writes through a temporary file beside each output, renamed into place, so a path
must name a regular file (or nothing yet) in a folder that exists and can be written. An
existing device, FIFO, socket or folder is refused rather than replaced by a regular file
(``-o /dev/null`` run as root would otherwise swap the device for a file), and no output may
be one of the command's inputs, or another of its outputs, by identity: a symlink, a hard
link or another spelling of the same file counts as the same file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from onnxopt.errors import UsageError

# How a path that exists but is not a regular file is named in the refusal.
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def check_destination(path: str, what: str = "output path") -> str:
    """``path`` made absolute, where a file can be written into place there; else a one-line
    :class:`UsageError` (``what`` names the option in it: "output path", "--json path")."""
    absolute = os.path.abspath(path)
    try:
        mode = os.stat(absolute).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:  # a path under a regular file: ``file/x``
        mode = None
    except OSError as e:
        raise UsageError(f"{path}: cannot use {what}: {e.strerror or e}") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "a special file")
        if stat.S_ISDIR(mode):
            raise UsageError(f"{path}: {what} is {kind}")
        raise UsageError(f"{path}: {what} is {kind}, not a regular file; refusing to replace it")
    folder = os.path.dirname(absolute)
    if not os.path.exists(folder):
        raise UsageError(f"{path}: output folder {folder} does not exist")
    if not os.path.isdir(folder):
        raise UsageError(f"{path}: output folder {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{path}: output folder is not writable")
    return absolute


def same_file(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one file: by device and inode where both exist (hard
    links too), else by their real paths (symlinks and ``..`` resolved)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


def check_outputs(outputs: dict[str, str | None],
                  inputs: Iterable[tuple[str, str | None]]) -> None:
    """Refuse, before any work, an output that cannot be written (:func:`check_destination`),
    that is one of ``inputs`` or that is another of ``outputs``. ``outputs`` maps the option
    that names each (``"-o"``, ``"--json"``) to its path, ``inputs`` pairs what each input is
    (``"MODEL"``, ``"--inputs"``) with its path; ``None`` is left out, and so is ``-``, which
    names the standard output."""
    given = {name: path for name, path in outputs.items() if path is not None and path != "-"}
    sources = list(inputs)
    for name, path in given.items():
        for source, source_path in sources:
            if source_path is not None and same_file(path, source_path):
                what = "output path" if name == "-o" else f"{name} path"
                raise UsageError(f"{path}: {what} is the input file; refusing to overwrite it"
                                 if source == "MODEL" else
                                 f"{path}: {what} is the {source} file; refusing to overwrite it")
    names = list(given)
    for i, name in enumerate(names):
        for other in names[i + 1:]:
            if same_file(given[name], given[other]):
                raise UsageError(f"{given[other]}: {other} names the same file as {name}; "
                                 "give each output a path of its own")
    for name, path in given.items():
        check_destination(path, "output path" if name == "-o" else f"{name} path")
