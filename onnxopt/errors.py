"""Errors a user can act on.

Every failure that is the input's fault (a missing file, a broken graph, an
unsafe external-data path) is raised as an :class:`OnnxoptError` whose message
is one line naming the problem; the command line prints that line and exits
with the error's ``exit_code`` instead of a traceback.
"""

from __future__ import annotations


class OnnxoptError(Exception):
    """A problem with the user's input; ``str(err)`` is the one-line message."""

    exit_code = 1


class UsageError(OnnxoptError):
    """The command was called wrongly (bad option, output path equal to the input)."""

    exit_code = 2


class ModelError(OnnxoptError):
    """The model file is unreadable or describes an invalid graph."""

    exit_code = 1


class VerificationError(OnnxoptError):
    """Two models disagree beyond tolerance."""

    exit_code = 1


class UnverifiedError(OnnxoptError):
    """Verification could not run: the original model refuses every input onnxopt can make
    (not a mismatch: nothing was compared). The message starts with "could not verify"."""

    exit_code = 1


class Interrupted(BaseException):
    """SIGINT or SIGTERM, as the console script raises it (:func:`onnxopt.cli.run`): where the
    main thread is, as Python raises KeyboardInterrupt, so that every ``finally`` runs (the
    writer's removes its temporary files). Not an Exception: nothing that handles errors may
    swallow it. ``exit_code`` is the one a shell gives a process its signal ended."""

    def __init__(self, number: int, name: str) -> None:
        super().__init__(name)
        self.exit_code = 128 + number
