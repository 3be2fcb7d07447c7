"""Which ONNX IR version to write.

onnx writes the newest IR version by default, which the installed ONNX
Runtime may refuse (onnx 1.23 writes 14; ORT 1.31 reads at most 13). The
exporter keeps the model's own IR version when ORT can read it, raises it
only if the opset needs more, and never goes above what ORT accepts.
"""

from __future__ import annotations

import functools
import re

from onnx import TensorProto, helper

_FALLBACK_MAX_IR = 10
_ABOVE_ANY_IR = 1000  # no ONNX Runtime reads this: its refusal names its maximum


def min_ir_for_opset(opset: int) -> int:
    """The lowest IR version that an ONNX-domain opset needs (from onnx's version table)."""
    best = None
    for _release, ir, op, *_ in helper.VERSION_TABLE:
        if op >= opset and (best is None or ir < best):
            best = ir
    return best if best is not None else 3


@functools.lru_cache(maxsize=1)
def ort_max_ir_version() -> int:
    """The highest IR version the installed onnxruntime loads, probed once with a tiny model.

    ORT's refusal of an IR version above its own says its maximum ("max supported IR version:
    13"); that version is then confirmed with one load. Only where the message says nothing
    usable are versions tried from the top down (each try a session: 21 ms for the four tries
    down to 13 against 8 ms for the two, a fixed cost of every command)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return _FALLBACK_MAX_IR

    def loads(ir: int) -> str | None:
        """``None`` where ORT loads the tiny model at ``ir``, else its refusal."""
        try:
            ort.InferenceSession(_tiny_model(ir).SerializeToString(),
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
    return _FALLBACK_MAX_IR


def _tiny_model(ir: int):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = ir
    return model


def choose_ir_version(original: int, opset: int) -> int:
    wanted = max(original, min_ir_for_opset(opset))
    return min(wanted, ort_max_ir_version())
