"""A LLaMA-shaped decoder of any size, its weights in external data, and onnxopt run on it.

The safeguard's checks must run on a model of every size in bounded memory (issue 29). The
shipped models are a few MB; an LLM's export is 10-100 GB. This builds the graph a dynamo
export of a float16 LLaMA has (RMSNorm between Casts, rotary, causal mask from the padding
mask, optional grouped-query repeat, SwiGLU), with every weight in ``<model>.data``. The
large weights are left as holes of a sparse file (zeros, no disk time), or written random
through a memory map (``--fill random``); the small ones (norm weights, the rotary table) are
always random, so no norm weight is the all-ones one normalization removes.

    python benchmarks/llama_shaped.py /tmp/llama7b --layers 32 --hidden 4096 --heads 32 \\
        --intermediate 11008 --vocab 32000 --optimize

``--optimize`` then runs ``onnxopt optimize`` on it and prints its wall time and peak RSS
(the command and its children: the largest one's resident set, and the largest sum of
proportional set sizes over the process tree, sampled every 20 ms). The test of the checks at size (tests/verification/
test_checks_at_size.py) builds a smaller one with :func:`build` and measures with
:func:`measure`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
_ALIGN = 4096
_RANDOM_BELOW = 1 << 20  # weights smaller than this are always written random


@dataclass(frozen=True)
class Shape:
    layers: int = 32
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 32
    intermediate: int = 11008
    vocab: int = 32000

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def parameters(self) -> int:
        h, kv = self.hidden, self.kv_heads * self.head_dim
        per_layer = h * h * 2 + h * kv * 2 + 3 * h * self.intermediate + 2 * h
        return self.layers * per_layer + 2 * self.vocab * h + h + self.head_dim // 2


class _Graph:
    """Nodes, small inline constants and external weights, named as they are added."""

    def __init__(self, data_name: str, dtype: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inline: list[TensorProto] = []
        self.weights: list[tuple[TensorProto, int]] = []  # (message, offset)
        self.data_name, self.dtype = data_name, dtype
        self.size = 0
        self._n = 0

    def op(self, op: str, *inputs: str, **attrs) -> str:
        self._n += 1
        out = f"{op.lower()}_{self._n}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=f"node_{out}", **attrs))
        return out

    def const(self, values, dtype: int = TensorProto.INT64) -> str:
        self._n += 1
        name = f"val_{self._n}"
        array = np.asarray(values, dtype=helper.tensor_dtype_to_np_dtype(dtype))
        self.inline.append(onnx.numpy_helper.from_array(array, name))
        return name

    def weight(self, name: str, dims: list[int], dtype: int | None = None) -> str:
        dtype = self.dtype if dtype is None else dtype
        t = TensorProto(name=name, data_type=dtype, dims=dims)
        length = math.prod(dims) * helper.tensor_dtype_to_np_dtype(dtype).itemsize
        offset = -(-self.size // _ALIGN) * _ALIGN
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.data_name), ("offset", str(offset)),
                           ("length", str(length))):
            t.external_data.add(key=key, value=value)
        self.weights.append((t, offset))
        self.size = offset + length
        return name


def _rms_norm(g: _Graph, x: str, weight: str, eps: str, two: str, last: str) -> str:
    up = g.op("Cast", x, to=TensorProto.FLOAT)
    mean = g.op("ReduceMean", g.op("Pow", up, two), last, keepdims=1)
    scaled = g.op("Mul", up, g.op("Reciprocal", g.op("Sqrt", g.op("Add", mean, eps))))
    return g.op("Mul", weight, g.op("Cast", scaled, to=g.dtype))


def _rotate(g: _Graph, t: str, cos: str, sin: str, c: dict) -> str:
    first = g.op("Slice", t, c["zero"], c["half"], c["three"], c["one"])
    second = g.op("Slice", t, c["half"], c["max"], c["three"], c["one"])
    rotated = g.op("Concat", g.op("Neg", second), first, axis=-1)
    return g.op("Add", g.op("Mul", t, cos), g.op("Mul", rotated, sin))


def _heads(g: _Graph, x: str, weight: str, shape: str) -> str:
    view = g.op("Reshape", g.op("MatMul", x, weight), shape, allowzero=1)
    return g.op("Transpose", view, perm=[0, 2, 1, 3])


def _layer(g: _Graph, s: Shape, i: int, x: str, c: dict) -> str:
    h, kv = s.hidden, s.kv_heads * s.head_dim
    p = f"model.layers.{i}."
    n = _rms_norm(g, x, g.weight(p + "input_layernorm.weight", [h]), c["eps"], c["two"],
                  c["last"])
    q = _heads(g, n, g.weight(p + "self_attn.q_proj.weight", [h, h]), c["split"])
    k = _heads(g, n, g.weight(p + "self_attn.k_proj.weight", [h, kv]), c["split"])
    v = _heads(g, n, g.weight(p + "self_attn.v_proj.weight", [h, kv]), c["split"])
    cos, sin = g.op("Unsqueeze", c["cos"], c["one"]), g.op("Unsqueeze", c["sin"], c["one"])
    q, k = _rotate(g, q, cos, sin, c), _rotate(g, k, cos, sin, c)
    if s.kv_heads != s.heads:  # repeat_kv: [B, kv, S, D] -> [B, kv, rep, S, D] -> [B, H, S, D]
        for name in ("k", "v"):
            t = k if name == "k" else v
            t = g.op("Reshape", g.op("Expand", g.op("Unsqueeze", t, c["two_axis"]),
                                     c["repeat"]), c["merged_heads"], allowzero=1)
            k, v = (t, v) if name == "k" else (k, t)
    kt = g.op("Transpose", k, perm=[0, 1, 3, 2])
    scores = g.op("MatMul", g.op("Mul", q, c["scale"]), g.op("Mul", kt, c["scale"]))
    probs = g.op("Softmax", g.op("Add", scores, c["mask"]), axis=-1)
    probs = g.op("Where", g.op("IsNaN", probs), c["zero_f"], probs)
    attn = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    merged = g.op("Reshape", attn, c["merge"], allowzero=1)
    x = g.op("Add", x, g.op("MatMul", merged, g.weight(p + "self_attn.o_proj.weight", [h, h])))
    n = _rms_norm(g, x, g.weight(p + "post_attention_layernorm.weight", [h]), c["eps"],
                  c["two"], c["last"])
    gate = g.op("MatMul", n, g.weight(p + "mlp.gate_proj.weight", [h, s.intermediate]))
    silu = g.op("Mul", gate, g.op("Sigmoid", gate))
    up = g.op("MatMul", n, g.weight(p + "mlp.up_proj.weight", [h, s.intermediate]))
    down = g.op("MatMul", g.op("Mul", silu, up),
                g.weight(p + "mlp.down_proj.weight", [s.intermediate, h]))
    return g.op("Add", x, down)


def graph_of(s: Shape, data_name: str, dtype: int = TensorProto.FLOAT16) -> _Graph:
    g = _Graph(data_name, dtype)
    hd = s.head_dim
    batch = g.op("Shape", "attention_mask", start=0, end=1)
    seq = g.op("Shape", "attention_mask", start=1, end=2)
    c = {"zero": g.const([0]), "one": g.const([1]), "three": g.const([3]),
         "half": g.const([hd // 2]), "max": g.const([INT64_MAX]), "last": g.const([-1]),
         "two_axis": g.const([2]),
         "eps": g.const(1e-6, TensorProto.FLOAT), "two": g.const(2.0, TensorProto.FLOAT),
         "scale": g.const(hd ** -0.25, dtype), "zero_f": g.const(0.0, dtype)}
    c["split"] = g.op("Concat", batch, seq, c["last"], g.const([hd]), axis=0)
    c["merge"] = g.op("Concat", batch, seq, c["last"], axis=0)
    c["repeat"] = g.op("Concat", batch, g.const([s.kv_heads]), g.const([s.heads // s.kv_heads]),
                       seq, g.const([hd]), axis=0)
    c["merged_heads"] = g.op("Concat", batch, g.const([s.heads]), seq, g.const([hd]), axis=0)
    x = g.op("Gather", g.weight("model.embed_tokens.weight", [s.vocab, s.hidden]),
             "input_ids", axis=0)
    # The causal mask and the padding mask, as a dynamo export builds them.
    zero_s, one_s = g.const(0), g.const(1)
    positions = g.op("Range", zero_s, g.op("Squeeze", seq), one_s)
    rows = g.op("Unsqueeze", g.op("Range", zero_s, g.op("Squeeze", batch), one_s),
                g.const([1, 2, 3]))
    queries = g.op("Unsqueeze", positions, g.const([0, 1, 3]))
    keys = g.op("Unsqueeze", positions, g.const([0, 1, 2]))
    causal = g.op("LessOrEqual", keys, queries)
    grid = g.op("Shape", g.op("Max", rows, keys), start=0)
    index = g.op("Concat", g.op("Unsqueeze", g.op("Expand", rows, grid), c["last"]),
                 g.op("Unsqueeze", g.op("Expand", keys, grid), c["last"]), axis=-1)
    padding = g.op("GatherND", g.op("Cast", "attention_mask", to=TensorProto.BOOL), index)
    allowed = g.op("And", causal, padding)
    lowest = float(np.finfo(helper.tensor_dtype_to_np_dtype(dtype)).min)
    c["mask"] = g.op("Where", allowed, c["zero_f"], g.const(lowest, dtype))
    # Rotary tables in float32, cast to the model's type.
    inv_freq = g.weight("model.rotary_emb.inv_freq", [hd // 2], TensorProto.FLOAT)
    angles = g.op("Mul", g.op("Cast", g.op("Unsqueeze", positions, g.const([0, 2])),
                              to=TensorProto.FLOAT), inv_freq)
    angles = g.op("Concat", angles, angles, axis=-1)
    c["cos"] = g.op("Cast", g.op("Cos", angles), to=dtype)
    c["sin"] = g.op("Cast", g.op("Sin", angles), to=dtype)
    for i in range(s.layers):
        x = _layer(g, s, i, x, c)
    x = _rms_norm(g, x, g.weight("model.norm.weight", [s.hidden]), c["eps"], c["two"],
                  c["last"])
    logits = g.op("MatMul", x, g.weight("lm_head.weight", [s.hidden, s.vocab]))
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="node_logits"))
    return g


def build(folder: str, s: Shape, *, dtype: int = TensorProto.FLOAT16, fill: str = "zeros",
          seed: int = 0) -> str:
    """Write ``folder/model.onnx`` and its ``model.onnx.data``; return the model's path.
    ``fill``: ``"zeros"`` leaves the large weights as holes of a sparse file, ``"random"``
    writes them (normal, scaled down) through a memory map."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    g = graph_of(s, "model.onnx.data", dtype)
    data_path = path + ".data"
    with open(data_path, "wb") as f:
        f.truncate(g.size)
    rng = np.random.default_rng(seed)
    data = np.memmap(data_path, dtype=np.uint8, mode="r+", shape=(g.size,))
    for t, offset in g.weights:
        np_type = helper.tensor_dtype_to_np_dtype(t.data_type)
        count = math.prod(t.dims)
        if fill != "random" and count * np_type.itemsize >= _RANDOM_BELOW:
            continue
        view = data[offset:offset + count * np_type.itemsize].view(np_type)
        for start in range(0, count, 1 << 24):  # 16M values at a time
            stop = min(count, start + (1 << 24))
            view[start:stop] = (rng.standard_normal(stop - start, dtype=np.float32)
                                * 0.02 + (1.0 if len(t.dims) == 1 else 0.0)).astype(np_type)
    data.flush()
    del data
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("logits", dtype, ["batch", "seq", s.vocab])]
    graph = helper.make_graph(g.nodes, "llama", inputs, outputs,
                              [t for t, _ in g.weights] + g.inline)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              producer_name="benchmarks/llama_shaped.py")
    model.ir_version = 10
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


@dataclass
class Measured:
    """One command's wall time and peak memory: ``max_rss`` the largest resident set of the
    command or any child it waited for (getrusage), ``tree_rss`` the largest sum of
    proportional set sizes over the command's process tree at once (sampled)."""

    seconds: float
    max_rss: int
    tree_rss: int
    returncode: int
    stdout: str
    stderr: str


def measure(argv: list[str], env: dict | None = None, interval: float = 0.02) -> Measured:
    """Run ``argv`` through a small Python parent that reports its children's peak RSS, while
    this process samples the tree's summed RSS in /proc."""
    wrapper = ("import resource, subprocess, sys, json\n"
               "rc = subprocess.call(sys.argv[1:])\n"
               "print(json.dumps({'rc': rc, 'max_rss': resource.getrusage("
               "resource.RUSAGE_CHILDREN).ru_maxrss * 1024}), file=sys.stderr)\n")
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", wrapper, *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            stop.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - start
    stop.set()
    sampler.join()
    lines = err.rstrip("\n").split("\n")
    summary = json.loads(lines[-1])
    return Measured(seconds, summary["max_rss"], peak[0], summary["rc"], out,
                    "\n".join(lines[:-1]))


def _tree_rss(root: int) -> int:
    """The summed proportional set size (bytes) of ``root`` and its descendants, from /proc: a
    page shared by several of them (a forked child's, copy-on-write) counts once in all, where
    their resident sets would count it in each."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _pss(pid)
        stack.extend(children.get(pid, ()))
    return total


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    for name, default in Shape().__dict__.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    parser.add_argument("--dtype", choices=["float16", "float32"], default="float16")
    parser.add_argument("--fill", choices=["zeros", "random"], default="zeros")
    parser.add_argument("--optimize", action="store_true")
    args = parser.parse_args()
    s = Shape(args.layers, args.hidden, args.heads, args.kv_heads, args.intermediate,
              args.vocab)
    dtype = TensorProto.FLOAT16 if args.dtype == "float16" else TensorProto.FLOAT
    start = time.perf_counter()
    path = build(args.folder, s, dtype=dtype, fill=args.fill)
    size = os.path.getsize(path + ".data")
    print(f"built {path}: {s.parameters():,} parameters, {size / 2**30:.2f} GiB of data "
          f"({time.perf_counter() - start:.1f} s)")
    if args.optimize:
        out = os.path.join(args.folder, "model.opt.onnx")
        report = os.path.join(args.folder, "report.json")
        m = measure([sys.executable, "-m", "onnxopt", "optimize", path, "-o", out,
                     "--json", report, "--target", "cpu"])
        print(m.stdout + m.stderr)
        print(f"optimize: exit {m.returncode}, {m.seconds:.1f} s, peak RSS {m.max_rss / 2**20:.0f} "
              f"MiB (largest process), {m.tree_rss / 2**20:.0f} MiB (process tree, sampled)")


if __name__ == "__main__":
    main()
