"""QDQ-quantized graphs: no fusion may drop an intermediate QuantizeLinear/DequantizeLinear pair.

A Q/DQ pair inside a block is a rounding the quantized model really performs;
a fused op that spans it would compute in full precision and change the result.
The patterns never look through Q/DQ nodes, so such blocks stay decomposed.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.rules import all_rules
from onnxopt.verification import verify_models
from onnxopt.verification.inputs import make_inputs


def _qdq(src, dst):
    quantization = pytest.importorskip("onnxruntime.quantization")

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            model = onnx.load(str(src))
            self.feeds = iter([make_inputs(model, {"batch": 1, "other": 8}, seed=s)
                               for s in range(2)])

        def get_next(self):
            return next(self.feeds, None)

    quantization.quantize_static(str(src), str(dst), Reader(),
                                 quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QInt8,
                                 weight_type=quantization.QuantType.QInt8)


def _qdq_counts(graph: onnx.GraphProto) -> Counter:
    """DequantizeLinear nodes, and QuantizeLinear nodes of activations.

    QuantizeLinear of a constant is folded into the int8 constant it computes
    (exactly what ONNX Runtime would compute), so only activation pairs count.
    """
    constants = {t.name for t in graph.initializer}
    constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    counts: Counter = Counter()
    for n in graph.node:
        if n.op_type == "DequantizeLinear":
            counts["dq"] += 1
        elif n.op_type == "QuantizeLinear" and n.input[0] not in constants:
            counts["q_activation"] += 1
    return counts


@pytest.mark.parametrize("name", ["bert.dynamo", "llama.ts"])
def test_qdq_pairs_survive(models_dir, tmp_path, name):
    dst = tmp_path / f"{name}.qdq.onnx"
    _qdq(models_dir / f"{name}.onnx", dst)
    # Normalization may merge duplicate Q/DQ nodes (CSE: the same computation twice);
    # what fusion must keep is every pair that normalization leaves.
    normalized = run_pipeline(str(dst), OptimizeOptions(target="cpu", disable=frozenset(
        r.name for r in all_rules())))
    before = _qdq_counts(normalized.proto.graph)
    assert before["q_activation"] > 0
    result = run_pipeline(str(dst), OptimizeOptions(target="cpu"))
    assert _qdq_counts(result.proto.graph) == before
    report = verify_models(str(dst), result.proto)
    assert report.ok, report.to_json()
    assert np.isfinite([o.max_rel for o in report.outputs]).all()
