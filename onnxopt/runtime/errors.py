"""Errors the runtime raises to its users."""

from onnxopt.errors import OnnxoptError


class RuntimeUnavailable(OnnxoptError, RuntimeError):
    """The model needs a kernel this machine cannot run (e.g. a CUDA-only op without CUDA).

    The message is one line naming the op and what is missing; as an
    OnnxoptError, the command line prints it instead of a traceback.
    """
