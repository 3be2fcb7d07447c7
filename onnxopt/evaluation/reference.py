"""One node evaluated with onnx's reference implementation (constant folding's fallback).

For standard ops whose NumPy replica constant folding lacks: the node alone becomes a
model — written as the model's opset spells it — and runs on its constant operands.
Anything the reference cannot do is ``None``: the node is then simply not folded.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from onnxopt.exporter.build import ProtoWriter
from onnxopt.ir.dtypes import dtype_code, from_numpy
from onnxopt.ir.model import Model
from onnxopt.ir.node import STANDARD_DOMAINS, Node


def evaluate_node(model: Model, node: Node, arrays: list[np.ndarray | None]) -> list | None:
    """``node``'s outputs on ``arrays`` (its inputs, ``None`` for omitted ones), or None."""
    try:
        proto = ProtoWriter(model).node(node)[-1]
        feeds: dict[str, np.ndarray] = {}
        inputs = []
        for name, arr in zip(proto.input, arrays):
            if name and name not in feeds:
                feeds[name] = arr
                inputs.append(helper.make_tensor_value_info(
                    name, dtype_code(from_numpy(arr.dtype)), arr.shape))
        outputs = [helper.make_tensor_value_info(o, 0, None) for o in proto.output]
        graph = helper.make_graph([proto], "fold", inputs, outputs)
        opsets = [helper.make_opsetid(d, v) for d, v in model.opset_imports.items()
                  if d in STANDARD_DOMAINS]
        one = helper.make_model(graph, opset_imports=opsets)
        one.ir_version = 10
        # Imported here: most models never reach this fallback, and the reference
        # implementation is the largest part of importing onnx (about 30 ms of every start).
        from onnx.reference import ReferenceEvaluator

        return list(ReferenceEvaluator(one).run(None, feeds))
    except Exception:  # noqa: BLE001 - whatever the reference cannot do, we do not fold
        return None
