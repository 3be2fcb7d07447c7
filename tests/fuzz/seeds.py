"""Seed models for the mutation fuzzer.

Why: mutating only transformer exports would leave whole kinds of graphs untested
(convolutions, control flow, sequences and optionals, ai.onnx.ml, old opsets,
quantized ops, local functions). The shipped exports in ``models/`` are read from
disk; every other seed is built here in code, so the tests need no extra files.
Every synthesized seed passes ``onnx.checker`` and runs in ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
from onnx import ModelProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = ROOT / "models"

SYNTHESIZED: dict[str, Callable[[], ModelProto]] = {}


def synthesized(fn: Callable[[], ModelProto]) -> Callable[[], ModelProto]:
    SYNTHESIZED[fn.__name__] = fn
    return fn


def _rand(seed: int, *shape: int, scale: float = 0.5) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _parse(text: str, ir_version: int, inits: dict[str, np.ndarray] | None = None,
           ) -> ModelProto:
    model = onnx.parser.parse_model(text)
    model.ir_version = ir_version
    for name, value in (inits or {}).items():
        model.graph.initializer.append(numpy_helper.from_array(value, name))
    return model


@synthesized
def cnn() -> ModelProto:
    """Conv, BatchNormalization, Relu, MaxPool, a residual Add, GlobalAveragePool, Gemm."""
    text = """
    <ir_version: 8, opset_import: ["": 13]>
    cnn (float[N, 3, 8, 8] x) => (float[N, 4] y) {
        c1 = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (x, w1, b1)
        bn = BatchNormalization <epsilon = 1e-5> (c1, s, bias, mean, var)
        r1 = Relu (bn)
        p1 = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (r1)
        c2 = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1], group = 2> (p1, w2)
        res = Add (c2, p1)
        a = Sigmoid (res)
        ap = AveragePool <kernel_shape = [2, 2], strides = [1, 1], pads = [0, 0, 1, 1]> (a)
        gp = GlobalAveragePool (ap)
        f = Flatten <axis = 1> (gp)
        g = Gemm <transB = 1, alpha = 0.5> (f, wf, bf)
        y = Softmax <axis = 1> (g)
    }
    """
    return _parse(text, 8, {
        "w1": _rand(1, 6, 3, 3, 3), "b1": _rand(2, 6), "s": _rand(3, 6) + 1,
        "bias": _rand(4, 6), "mean": _rand(5, 6), "var": np.abs(_rand(6, 6)) + 0.5,
        "w2": _rand(7, 6, 3, 3, 3), "wf": _rand(8, 4, 6), "bf": _rand(9, 4)})


@synthesized
def control_flow() -> ModelProto:
    """If with branches that capture outer values, a Loop with a scan output, and a Scan."""
    text = """
    <ir_version: 8, opset_import: ["": 16]>
    flow (float[N, 4] x, bool c) => (float[N, 4] y, float[3, N, 4] ys, float[4] z) {
        h = MatMul (x, w)
        y0 = If (c) <
            then_branch = g1 () => (float[N, 4] t) { t = Add (h, x) },
            else_branch = g2 () => (float[N, 4] e) { e = Mul (h, x) }
        >
        trip = Constant <value = int64 {3}> ()
        yes = Constant <value = bool {1}> ()
        y, ys = Loop (trip, yes, y0) <
            body = lb (int64 i, bool cin, float[N, 4] acc) => (bool cout, float[N, 4] acc2,
                                                                 float[N, 4] s) {
                cout = Identity (cin)
                acc2 = Tanh (acc)
                s = Add (acc2, x)
            }
        >
        init = Constant <value = float[4] {0, 0, 0, 0}> ()
        z, rows = Scan <num_scan_inputs = 1,
            body = sb (float[4] st, float[4] row) => (float[4] st2, float[4] r2) {
                st2 = Add (st, row)
                r2 = Relu (row)
            }
        > (init, x)
    }
    """
    return _parse(text, 8, {"w": _rand(11, 4, 4)})


@synthesized
def sequences() -> ModelProto:
    """Sequence and Optional values: SplitToSequence, SequenceAt, ConcatFromSequence,
    Optional, OptionalHasElement, OptionalGetElement."""
    text = """
    <ir_version: 8, opset_import: ["": 18]>
    seqs (float[N, 6] x) => (float[N, 6] y, bool has, float[N, 2] first) {
        sq = SplitToSequence <axis = 1> (x, split)
        first = SequenceAt (sq, zero)
        n = SequenceLength (sq)
        sq2 = SequenceInsert (sq, first)
        cat = ConcatFromSequence <axis = 1> (sq2)
        part = Slice (cat, st, en, ax)
        opt = Optional (part)
        has = OptionalHasElement (opt)
        got = OptionalGetElement (opt)
        y = Mul (got, x)
    }
    """
    return _parse(text, 8, {
        "split": np.array([2, 2, 2], np.int64), "zero": np.array(0, np.int64),
        "st": np.array([0], np.int64), "en": np.array([6], np.int64),
        "ax": np.array([1], np.int64)})


@synthesized
def ml_only() -> ModelProto:
    """Only ai.onnx.ml ops: Scaler, Normalizer, LinearRegressor, Binarizer."""
    nodes = [
        helper.make_node("Scaler", ["x"], ["s"], domain="ai.onnx.ml", offset=[0.5, 0.0, -1.0],
                         scale=[2.0, 1.0, 0.5]),
        helper.make_node("Normalizer", ["s"], ["n"], domain="ai.onnx.ml", norm="L2"),
        helper.make_node("LinearRegressor", ["n"], ["r"], domain="ai.onnx.ml",
                         coefficients=[0.3, -0.2, 0.1, 1.0, 2.0, 3.0], intercepts=[0.1, 0.2],
                         targets=2),
        helper.make_node("Binarizer", ["r"], ["b"], domain="ai.onnx.ml", threshold=0.0),
    ]
    graph = helper.make_graph(nodes, "ml", [helper.make_tensor_value_info("x", 1, ["N", 3])],
                              [helper.make_tensor_value_info("b", 1, ["N", 2]),
                               helper.make_tensor_value_info("n", 1, ["N", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3),
                                                    helper.make_opsetid("", 15)])
    model.ir_version = 8
    return model


@synthesized
def old_opset() -> ModelProto:
    """Opset 9 spellings: Unsqueeze/Squeeze/Slice/ReduceSum axes as attributes, Upsample-free
    MLP with Gemm, Softmax's 2-D coercion, Dropout with ratio attribute."""
    text = """
    <ir_version: 4, opset_import: ["": 9]>
    old (float[N, 8] x) => (float[N, 4] y, float[N, 1] m) {
        g = Gemm <transB = 1> (x, w, b)
        u = Unsqueeze <axes = [2]> (g)
        s = Squeeze <axes = [2]> (u)
        t = Tanh (s)
        d = Dropout <ratio = 0.25> (t)
        sl = Slice <starts = [0], ends = [4], axes = [1]> (d)
        y = Softmax <axis = 1> (sl)
        m = ReduceSum <axes = [1], keepdims = 1> (y)
    }
    """
    return _parse(text, 4, {"w": _rand(21, 6, 8), "b": _rand(22, 6)})


@synthesized
def mini_transformer() -> ModelProto:
    """A hand-written opset-13 attention block (Q·Kᵀ scaled by Div, additive mask, Softmax,
    head split/merge), a LayerNorm decomposition and an erf GELU."""
    h, heads = 8, 2
    d = h // heads
    text = f"""
    <ir_version: 7, opset_import: ["": 13]>
    block (float[B, S, {h}] x, float[B, 1, 1, S] mask) => (float[B, S, {h}] y) {{
        q = MatMul (x, wq)
        k = MatMul (x, wk)
        v = MatMul (x, wv)
        q4 = Reshape (q, shp)
        k4 = Reshape (k, shp)
        v4 = Reshape (v, shp)
        qt = Transpose <perm = [0, 2, 1, 3]> (q4)
        kt = Transpose <perm = [0, 2, 3, 1]> (k4)
        vt = Transpose <perm = [0, 2, 1, 3]> (v4)
        sc = MatMul (qt, kt)
        sc2 = Div (sc, scale)
        sc3 = Add (sc2, mask)
        p = Softmax <axis = -1> (sc3)
        o = MatMul (p, vt)
        ot = Transpose <perm = [0, 2, 1, 3]> (o)
        om = Reshape (ot, shp3)
        proj = MatMul (om, wo)
        res = Add (proj, x)
        mu = ReduceMean <axes = [-1]> (res)
        xc = Sub (res, mu)
        sq = Pow (xc, two)
        var = ReduceMean <axes = [-1]> (sq)
        ve = Add (var, eps)
        sd = Sqrt (ve)
        nrm = Div (xc, sd)
        ln = Mul (nrm, gamma)
        ln2 = Add (ln, beta)
        gd = Div (ln2, sqrt2)
        ge = Erf (gd)
        g1 = Add (ge, one)
        g2 = Mul (ln2, g1)
        y = Mul (g2, half)
    }}
    """
    return _parse(text, 7, {
        "wq": _rand(31, h, h), "wk": _rand(32, h, h), "wv": _rand(33, h, h),
        "wo": _rand(34, h, h), "shp": np.array([0, 0, heads, d], np.int64),
        "shp3": np.array([0, 0, h], np.int64), "scale": np.array(np.sqrt(d), np.float32),
        "two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32),
        "gamma": _rand(35, h) + 1, "beta": _rand(36, h), "sqrt2": np.array(1.4142135, np.float32),
        "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)})


@synthesized
def recurrent() -> ModelProto:
    """LSTM and GRU with initial states and optional inputs omitted by the empty name."""
    text = """
    <ir_version: 8, opset_import: ["": 14]>
    rnn (float[T, 1, 4] x) => (float[T, 1, 1, 3] y, float[1, 1, 3] hg) {
        y, h, c = LSTM <hidden_size = 3> (x, w, r, b, "", h0, c0)
        ys = Squeeze (y, one)
        yg, hg = GRU <hidden_size = 3, linear_before_reset = 1> (ys, wg, rg)
    }
    """
    return _parse(text, 8, {
        "w": _rand(41, 1, 12, 4), "r": _rand(42, 1, 12, 3), "b": _rand(43, 1, 24),
        "h0": np.zeros((1, 1, 3), np.float32), "c0": np.zeros((1, 1, 3), np.float32),
        "one": np.array([1], np.int64), "wg": _rand(44, 1, 9, 3), "rg": _rand(45, 1, 9, 3)})


@synthesized
def quantized() -> ModelProto:
    """QuantizeLinear / DequantizeLinear around MatMul, and MatMulInteger."""
    text = """
    <ir_version: 8, opset_import: ["": 13]>
    quant (float[N, 4] x) => (float[N, 4] y, int32[N, 4] yi) {
        qx = QuantizeLinear (x, sx, zx)
        dx = DequantizeLinear (qx, sx, zx)
        dw = DequantizeLinear (qw, sw, zw)
        y = MatMul (dx, dw)
        yi = MatMulInteger (qx, qw, zx, zw)
    }
    """
    rng = np.random.default_rng(51)
    return _parse(text, 8, {
        "sx": np.array(0.05, np.float32), "zx": np.array(128, np.uint8),
        "qw": rng.integers(0, 255, (4, 4)).astype(np.uint8),
        "sw": np.array(0.02, np.float32), "zw": np.array(120, np.uint8)})


@synthesized
def mixed_dtypes() -> ModelProto:
    """Integer, boolean and float16 paths: Gather with int indices, Where on a comparison,
    Cast round trips, Shape arithmetic, Expand, CumSum, TopK."""
    text = """
    <ir_version: 8, opset_import: ["": 17]>
    mixed (int64[N, L] ids, float[N, L] w) => (float[N, L, 4] y, int64[N, 2] top,
                                               float16[N, L] h) {
        e = Gather (table, ids)
        pos = Greater (w, zero)
        ws = Where (pos, w, zero)
        wu = Unsqueeze (ws, axes)
        y0 = Mul (e, wu)
        shp = Shape (y0)
        y = Expand (y0, shp)
        h = Cast <to = 10> (ws)
        cs = CumSum (w, ax1)
        tv, top = TopK <axis = 1> (cs, k)
    }
    """
    return _parse(text, 8, {
        "table": _rand(61, 8, 4), "zero": np.array(0.0, np.float32),
        "axes": np.array([2], np.int64), "ax1": np.array(1, np.int64),
        "k": np.array([2], np.int64)})


@synthesized
def local_function() -> ModelProto:
    """A custom-domain node implemented by a model-local function (a GELU-like body)."""
    text = """
    <ir_version: 8, opset_import: ["": 18, "local": 1]>
    withfn (float[N, 5] x) => (float[N, 5] y) {
        a = local.MyGelu (x)
        y = local.MyGelu (a)
    }
    <domain: "local", opset_import: ["": 18]>
    MyGelu (x) => (y) {
        half = Constant <value_float = 0.5> ()
        one = Constant <value_float = 1.0> ()
        r2 = Constant <value_float = 1.4142135> ()
        d = Div (x, r2)
        e = Erf (d)
        p = Add (e, one)
        m = Mul (x, p)
        y = Mul (m, half)
    }
    """
    return _parse(text, 8)


@synthesized
def rms_swiglu() -> ModelProto:
    """An RMSNorm with a residual, SwiGLU and SiLU at opset 18 (axes as inputs), with a
    symbolic sequence."""
    h = 8
    text = f"""
    <ir_version: 8, opset_import: ["": 18]>
    llamaish (float[B, S, {h}] x, float[B, S, {h}] r) => (float[B, S, {h}] y) {{
        s = Add (x, r)
        sq = Mul (s, s)
        ms = ReduceMean <keepdims = 1> (sq, axes)
        me = Add (ms, eps)
        rs = Sqrt (me)
        inv = Reciprocal (rs)
        n = Mul (s, inv)
        nw = Mul (n, g)
        a = MatMul (nw, wa)
        b = MatMul (nw, wb)
        sg = Sigmoid (a)
        si = Mul (a, sg)
        sw = Mul (si, b)
        y = MatMul (sw, wd)
    }}
    """
    return _parse(text, 8, {
        "axes": np.array([-1], np.int64), "eps": np.array(1e-6, np.float32),
        "g": _rand(71, h) + 1, "wa": _rand(72, h, 16), "wb": _rand(73, h, 16),
        "wd": _rand(74, 16, h)})


SEED_FOLDERS = ("", "with_past", "other")
"""Where the shipped models lie under ``models/``: the exports, the decoders with a KV cache,
and the other exporters' spellings (a new folder of models is a new seed folder here)."""


def model_paths() -> list[Path]:
    return [p for folder in SEED_FOLDERS for p in sorted((MODELS_DIR / folder).glob("*.onnx"))]


@cache
def load_seed(name: str) -> ModelProto:
    """A seed by name: a synthesized one, or a file stem under ``models/`` (``with_past/...``
    for one in a seed folder)."""
    if name in SYNTHESIZED:
        return SYNTHESIZED[name]()
    return onnx.load(str(MODELS_DIR / f"{name}.onnx"))


def seed_names(include_files: bool = True) -> list[str]:
    files = ([p.relative_to(MODELS_DIR).as_posix()[:-len(".onnx")] for p in model_paths()]
             if include_files else [])
    return sorted(SYNTHESIZED) + files
