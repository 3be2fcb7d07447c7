"""What the stages ask of ONNX Runtime itself: its version, and the highest IR version it loads.

onnx writes the newest IR version by default, which the installed ORT may refuse (onnx
1.23 writes 14; ORT 1.31 reads at most 13); the exporter never writes above this ceiling
(:mod:`onnxopt.exporter.versions`). Both facts are found where ORT is loaded: the ORT
helper finds them right after it loads ORT (:mod:`onnxopt.ort_helper`), off the parent's
path, and the parent asks for them once.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

FALLBACK_MAX_IR = 10
_ABOVE_ANY_IR = 1000  # no ONNX Runtime reads this: its refusal names its maximum


class BrokenRuntime(RuntimeError):
    """``import onnxruntime`` gives a module that is not ONNX Runtime's whole Python package:
    the message says what is missing and how to reinstall it. (The command line prints it as
    one line and exits 1; it is not an :class:`onnxopt.errors.OnnxoptError` only because this
    module imports nothing of onnxopt's.)"""

    exit_code = 1


# What onnxopt reads of the module; where one is missing, the package is broken.
_NEEDED = ("__version__", "InferenceSession", "SessionOptions", "get_available_providers")


def runtime_problem() -> str | None:
    """What is wrong with the installed ONNX Runtime, in a sentence that says how to fix it;
    ``None`` where it imports whole (or is not installed at all, which the caller says)."""
    try:
        import onnxruntime as ort
    except ModuleNotFoundError as e:
        if e.name == "onnxruntime":
            return None
        return _broken(f"importing it fails ({e})")
    except ImportError as e:
        return _broken(f"importing it fails ({e})")
    missing = [name for name in _NEEDED if not hasattr(ort, name)]
    if missing:
        where = getattr(ort, "__file__", None) or ", ".join(getattr(ort, "__path__", []))
        return _broken(f"the module{f' at {where}' if where else ''} has no "
                       f"{', '.join(missing)}")
    return None


def _broken(what: str) -> str:
    return (f"ONNX Runtime is not installed whole: {what}. This happens when onnxruntime and "
            "onnxruntime-gpu were both installed and one of them was uninstalled (they share "
            "the onnxruntime folder); reinstall the one you use: pip install "
            "--force-reinstall onnxruntime-gpu (or onnxruntime)")


@dataclass(frozen=True)
class RuntimeFacts:
    """ORT's version (``None`` where it cannot be imported) and the highest IR version it
    loads."""

    version: str | None
    max_ir_version: int


@functools.lru_cache(maxsize=1)
def find_facts() -> RuntimeFacts:
    """The facts, found in this process (which loads ORT for them), once. A broken install
    raises :class:`BrokenRuntime`; one that is not there at all has no version."""
    problem = runtime_problem()
    if problem is not None:
        raise BrokenRuntime(problem)
    try:
        import onnxruntime as ort
    except ImportError:
        return RuntimeFacts(None, FALLBACK_MAX_IR)
    return RuntimeFacts(str(ort.__version__), probe_max_ir_version())


def probe_max_ir_version() -> int:
    """The highest IR version the installed onnxruntime loads, probed with a tiny model.

    ORT's refusal of an IR version above its own says its maximum ("max supported IR version:
    13"); that version is then confirmed with one load. Only where the message says nothing
    usable are versions tried from the top down (each try a session: 21 ms for the four tries
    down to 13 against 8 ms for the two)."""
    import onnxruntime as ort

    def loads(ir: int) -> str | None:
        """``None`` where ORT loads the tiny model at ``ir``, else its refusal."""
        try:
            ort.InferenceSession(tiny_model(ir).SerializeToString(),
                                 providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - a refusal is the answer we probe for
            return str(e)
        return None

    said = re.search(r"max supported IR version: (\d+)", loads(_ABOVE_ANY_IR) or "")
    if said and int(said.group(1)) < _ABOVE_ANY_IR and loads(int(said.group(1))) is None:
        return int(said.group(1))
    for ir in range(16, 6, -1):
        if loads(ir) is None:
            return ir
    return FALLBACK_MAX_IR


def tiny_model(ir: int):
    """One Identity node, at IR version ``ir``."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = ir
    return model
