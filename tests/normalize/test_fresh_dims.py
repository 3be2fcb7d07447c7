"""Unknown dims get symbols of their own (``?N``): values computed from the same value share
them, a Reshape's -1 divides them out, and no file ever holds one."""

from __future__ import annotations

from onnxopt import normalize
from onnxopt.exporter import export_model
from onnxopt.fuse import fuse
from onnxopt.importer import import_model
from onnxopt.ir import symdim as sd
from onnxopt.legality.target import Target
from onnxopt.normalize.shapes import infer_shapes
from onnxopt.options import OptimizeOptions
from onnxopt.rules.silu import Silu
from onnxopt.rules.swiglu import SwiGLU

# A mixture-of-experts expert: the tokens routed to it are a data-dependent number of rows.
EXPERT = """
g (float[n, 8] x, bool[n] routed) => (float[?, 8] y) <float[8, 16] wg = {WG},
        float[8, 16] wu = {WU}, float[16, 8] wd = {WD}> {
    idx = NonZero (routed)
    zero = Constant <value = int64[1] {0}> ()
    rows = Squeeze (idx, zero)
    t = Gather <axis = 0> (x, rows)
    gate = MatMul (t, wg)
    up = MatMul (t, wu)
    sg = Sigmoid (gate)
    act = Mul (gate, sg)
    h = Mul (act, up)
    y = MatMul (h, wd)
}"""


def _expert() -> str:
    text = EXPERT
    for name, size in (("WG", 128), ("WU", 128), ("WD", 128)):
        text = text.replace(name, ", ".join(f"{((i * 7) % 13 - 6) / 10:g}" for i in range(size)))
    return text


def test_values_from_one_unknown_dim_share_its_symbol(onnx_text):
    model = import_model(onnx_text(_expert()))
    infer_shapes(model)
    values = {v.name: v for n in model.graph for v in n.outputs}
    rows = values["t"].shape[0]
    assert sd.is_fresh(rows)
    assert values["gate"].shape == values["up"].shape == (rows, 16)
    assert not any(sd.is_fresh(d) for d in values["t"].shape[1:])


def test_an_expert_mlp_of_routed_rows_fuses_as_swiglu(onnx_text):
    model = import_model(onnx_text(_expert()))
    normalize.run(model, OptimizeOptions())
    report = fuse(model, [Silu(), SwiGLU()], Target())
    assert report.count("swiglu") == 1, report.summary()


def test_fresh_symbols_are_never_written(onnx_text):
    model = import_model(onnx_text(_expert()))
    infer_shapes(model)
    proto = export_model(model)
    dims = [d.dim_param for vi in (*proto.graph.value_info, *proto.graph.output)
            for d in vi.type.tensor_type.shape.dim]
    assert not any(p.startswith("?") for p in dims)


def test_two_different_symbols_do_not_broadcast_to_either():
    assert sd.broadcast("a", "b") is None
    assert sd.broadcast("a", 1) == "a" and sd.broadcast("a", 4) == 4
