"""One session, several input shapes: nothing about a shape is fixed at registration."""

from __future__ import annotations

import numpy as np

from onnxopt.runtime import cpu_kernel, session

DOMAIN = "ai.onnxopt.test"


def test_two_sizes_through_one_session(registry, model):
    @cpu_kernel(
        DOMAIN,
        "Softmax",
        inputs=["x: float32"],
        outputs=["y: float32"],
        shape=lambda x: [x.shape],
        registry=registry,
    )
    def softmax(x, *, out):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        np.divide(e, e.sum(axis=-1, keepdims=True), out=out)

    sess = session(
        model("g (float[B, S] x) => (float[B, S] y) { y = ai.onnxopt.test.Softmax (x) }"),
        registry=registry,
    )
    for shape in [(2, 3), (5, 17), (1, 1), (2, 3)]:
        x = np.random.randn(*shape).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        assert y.shape == shape
        np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-5)


def test_output_shape_depends_on_input_values(registry, model):
    """Returned arrays may have any shape: ORT allocates what the kernel produced."""

    @cpu_kernel(DOMAIN, "Positives", inputs=["x: int64"], outputs=["y: int64"], registry=registry)
    def positives(x):
        return x[x > 0]

    sess = session(
        model("g (int64[N] x) => (int64[M] y) { y = ai.onnxopt.test.Positives (x) }"),
        registry=registry,
    )
    (a,) = sess.run(None, {"x": np.array([3, -1, 4, -1, 5])})
    (b,) = sess.run(None, {"x": np.array([-9, -2])})
    np.testing.assert_array_equal(a, [3, 4, 5])
    assert b.shape == (0,)


def test_scalar_and_empty_tensors(registry, model):
    @cpu_kernel(DOMAIN, "AddOne", inputs=["x: float32"], outputs=["y: float32"], registry=registry)
    def add_one(x):
        return x + 1

    sess = session(
        model(
            "g (float[N] x, float s) => (float[N] y, float t) {"
            " y = ai.onnxopt.test.AddOne (x) t = ai.onnxopt.test.AddOne (s) }"
        ),
        registry=registry,
    )
    y, t = sess.run(None, {"x": np.zeros(0, np.float32), "s": np.array(2, np.float32)})
    assert y.shape == (0,) and t.shape == () and t == 3
