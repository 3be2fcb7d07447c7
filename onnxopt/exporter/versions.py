"""Which ONNX IR version to write.

onnx writes the newest IR version by default, which the installed ONNX
Runtime may refuse (onnx 1.23 writes 14; ORT 1.31 reads at most 13). The
exporter keeps the model's own IR version when ORT can read it, raises it
only if the opset needs more, and never goes above what ORT accepts
(:mod:`onnxopt.ort_facts`).
"""

from __future__ import annotations

from onnx import helper

from onnxopt import ort_helper


def min_ir_for_opset(opset: int) -> int:
    """The lowest IR version that an ONNX-domain opset needs (from onnx's version table)."""
    best = None
    for _release, ir, op, *_ in helper.VERSION_TABLE:
        if op >= opset and (best is None or ir < best):
            best = ir
    return best if best is not None else 3


def ort_max_ir_version() -> int:
    """The highest IR version the installed onnxruntime loads: found by the ORT helper
    (:mod:`onnxopt.ort_helper`) right after it loads ORT, off the parent's path."""
    return ort_helper.facts().max_ir_version


def choose_ir_version(original: int, opset: int) -> int:
    wanted = max(original, min_ir_for_opset(opset))
    return min(wanted, ort_max_ir_version())
