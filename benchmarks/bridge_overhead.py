"""Per-call cost of a Python kernel behind onnxopt's ORT bridge, next to ORT's native Identity.

Each path runs a 1-element float32 tensor through a one-node model; the number is
the median wall time of one `InferenceSession.run` over 2,000 runs (after 200
warm-up runs), so it is the fixed cost of a call, not of the arithmetic.

    python benchmarks/bridge_overhead.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import onnx.parser
import onnxruntime as ort

from onnxopt.runtime import KernelRegistry, cpu_kernel, session

RUNS, WARMUP = 2000, 200
DOMAIN = "ai.onnxopt.bench"


def _model(node: str) -> onnx.ModelProto:
    proto = onnx.parser.parse_model(
        f'<ir_version: 10, opset_import: ["": 21, "{DOMAIN}": 1]>'
        f"g (float[1] x) => (float[1] y) {{ y = {node} (x) }}"
    )
    proto.ir_version = 10
    return proto


def _median_us(sess: ort.InferenceSession, feed: dict) -> float:
    for _ in range(WARMUP):
        sess.run(None, feed)
    times = []
    for _ in range(RUNS):
        start = time.perf_counter_ns()
        sess.run(None, feed)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


def main() -> None:
    registry = KernelRegistry()

    @cpu_kernel(
        DOMAIN, "Returning", inputs=["x: float32"], outputs=["y: float32"], registry=registry
    )
    def returning(x):
        return x

    @cpu_kernel(
        DOMAIN,
        "InPlace",
        inputs=["x: float32"],
        outputs=["y: float32"],
        shape=lambda x: [x.shape],
        registry=registry,
    )
    def in_place(x, *, out):
        out[...] = x

    feed = {"x": np.ones(1, np.float32)}
    options = ort.SessionOptions()
    native = ort.InferenceSession(
        _model("Identity").SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    rows = [
        ("ORT native Identity", _median_us(native, feed)),
        (
            "bridge, kernel returns an array (copied into ORT's buffer)",
            _median_us(session(_model(f"{DOMAIN}.Returning"), registry=registry), feed),
        ),
        (
            "bridge, kernel writes into ORT's buffer (shape function)",
            _median_us(session(_model(f"{DOMAIN}.InPlace"), registry=registry), feed),
        ),
    ]
    base = rows[0][1]
    print(f"onnxruntime {ort.__version__}, median of {RUNS} runs, 1-element float32")
    for name, us in rows:
        extra = "" if us is base else f"   (+{us - base:.1f} us over native)"
        print(f"  {name:<62} {us:6.1f} us{extra}")


if __name__ == "__main__":
    main()
