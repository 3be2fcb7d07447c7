"""Small helpers the emitters share: constants, layout conversions, the NaN guard."""

from __future__ import annotations

import numpy as np

from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.node import STANDARD_DOMAINS
from onnxopt.ir.value import Value

BNSH_TO_BSNH = (0, 2, 1, 3)


def i64(b, values, hint: str) -> Value:
    return b.const(np.array(values, np.int64), hint)


def scalar(b, value: float, dtype: str | None, hint: str) -> Value:
    return b.const(np.array(value, numpy_dtype(dtype or "float32")), hint)


def ones(b, size: int, dtype: str | None, hint: str = "ones") -> Value:
    return b.const(np.ones([size], numpy_dtype(dtype or "float32")), hint)


def transposed_from(value: Value, perm) -> Value | None:
    """``x`` when ``value = Transpose(x, perm)``, else None."""
    node = value.producer
    if node is None or node.op_type != "Transpose" or node.domain not in STANDARD_DOMAINS:
        return None
    p = node.attr("perm", node.sem.get("perm"))
    return node.inputs[0] if p is not None and tuple(p) == tuple(perm) else None


def zero_nan(b, x: Value, dtype: str | None) -> Value:
    """``Where(IsNaN(x), 0, x)``: the NaN guard of ``nan_to_zero``."""
    return b.op("Where", b.op("IsNaN", x), scalar(b, 0.0, dtype, "zero"), x)
