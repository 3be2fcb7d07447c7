"""Several sessions live at once, and threads create and run sessions concurrently."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from onnxopt.runtime import cpu_kernel, session

DOMAIN = "ai.onnxopt.test"
GRAPH = "g (float[N] x) => (float[N] y) {{ y = ai.onnxopt.test.Affine <scale = {scale}> (x) }}"


def _declare(registry):
    @cpu_kernel(
        DOMAIN,
        "Affine",
        inputs=["x: float32"],
        outputs=["y: float32"],
        attrs={"scale": float},
        registry=registry,
    )
    def affine(x, *, scale):
        return x * scale + 1


def test_several_sessions_at_once(registry, model):
    _declare(registry)
    sessions = {
        s: session(model(GRAPH.format(scale=float(s))), registry=registry) for s in range(1, 6)
    }
    x = np.arange(4, dtype=np.float32)
    for _ in range(2):  # interleaved use: each keeps its own attributes
        for scale, sess in sessions.items():
            (y,) = sess.run(None, {"x": x})
            np.testing.assert_array_equal(y, x * scale + 1)


def test_four_threads_create_and_run_sessions(registry, model):
    _declare(registry)
    barrier = threading.Barrier(4)

    def work(worker: int) -> int:
        barrier.wait()
        checked = 0
        for round_ in range(5):
            scale = float(worker * 10 + round_)
            sess = session(model(GRAPH.format(scale=scale)), registry=registry)
            for size in (3, 1000):
                x = np.random.rand(size).astype(np.float32)
                (y,) = sess.run(None, {"x": x})
                np.testing.assert_allclose(y, x * scale + 1, rtol=1e-6)
                checked += 1
        return checked

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(work, range(4))) == [10, 10, 10, 10]


def test_one_session_shared_by_threads(registry, model):
    _declare(registry)
    sess = session(model(GRAPH.format(scale=3.0)), registry=registry)

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(50):
            x = rng.random(int(rng.integers(1, 64))).astype(np.float32)
            (y,) = sess.run(None, {"x": x})
            np.testing.assert_allclose(y, x * 3 + 1, rtol=1e-6)

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(work, range(4)))
