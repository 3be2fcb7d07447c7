"""Kernel instances live exactly as long as their session, and exit with live sessions is clean."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np

from onnxopt.runtime import cpu_kernel, customop, session

DOMAIN = "ai.onnxopt.test"


def test_instances_are_released_with_the_session(registry, model):
    @cpu_kernel(DOMAIN, "Inc", inputs=["x: float32"], outputs=["y: float32"], registry=registry)
    def inc(x):
        return x + 1

    gc.collect()
    before = len(customop._instances)
    m = model("""g (float[N] x) => (float[N] y) {
        t = ai.onnxopt.test.Inc (x)
        y = ai.onnxopt.test.Inc (t)
    }""")
    sess = session(m, registry=registry)
    assert len(customop._instances) == before + 2  # one per node
    sess.run(None, {"x": np.zeros(1, np.float32)})
    del sess
    gc.collect()
    assert len(customop._instances) == before


def test_process_exits_cleanly_with_live_sessions():
    code = textwrap.dedent("""
        import threading
        import numpy as np, onnx.parser
        from onnxopt.runtime import cpu_kernel, session
        @cpu_kernel("ai.t", "Inc", inputs=["x: float32"], outputs=["y: float32"])
        def inc(x):
            return x + 1
        m = onnx.parser.parse_model('<ir_version: 10, opset_import: ["": 21, "ai.t": 1]>'
                                    'g (float[N] x) => (float[N] y) { y = ai.t.Inc (x) }')
        KEPT = [session(m) for _ in range(3)]
        def worker():
            KEPT.append(session(m))
            KEPT[-1].run(None, {"x": np.zeros(2, np.float32)})
        t = threading.Thread(target=worker); t.start(); t.join()
        print(KEPT[0].run(None, {"x": np.zeros(2, np.float32)})[0].tolist())
    """)
    result = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[1.0, 1.0]"
