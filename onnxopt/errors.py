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
