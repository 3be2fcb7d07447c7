"""Which ONNX IR version to write.

onnx writes the newest IR version by default, which the installed ONNX
Runtime may refuse (onnx 1.23 writes 14; ORT 1.31 reads at most 13). The
exporter keeps the model's own IR version when ORT can read it, raises it
only if the opset needs more, and never goes above what ORT accepts.
"""

from __future__ import annotations

import functools

from onnx import TensorProto, helper

_FALLBACK_MAX_IR = 10


def min_ir_for_opset(opset: int) -> int:
    """The lowest IR version that an ONNX-domain opset needs (from onnx's version table)."""
    best = None
    for _release, ir, op, *_ in helper.VERSION_TABLE:
        if op >= opset and (best is None or ir < best):
            best = ir
    return best if best is not None else 3


@functools.lru_cache(maxsize=1)
def ort_max_ir_version() -> int:
    """The highest IR version the installed onnxruntime loads (probed once with a tiny model)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return _FALLBACK_MAX_IR

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
    for ir in range(16, 6, -1):
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = ir
        try:
            ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            return ir
        except Exception:  # noqa: BLE001, S112 - a refusal is the answer we probe for
            continue
    return _FALLBACK_MAX_IR


def choose_ir_version(original: int, opset: int) -> int:
    wanted = max(original, min_ir_for_opset(opset))
    return min(wanted, ort_max_ir_version())
