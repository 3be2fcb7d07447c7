"""Import/export cost: linear in the graph, flat in memory for big external weights (issue 2).

    python benchmarks/import_export.py                  # everything, figures as in RESULTS.md
    python benchmarks/import_export.py --layers 12 48   # only the scaling part, fewer sizes
    python benchmarks/import_export.py --big-gib 0      # skip the external-weights part

Part 1 builds GPT-2-like graphs (TorchScript spelling: LayerNorm decomposed into
ReduceMean/Sub/Pow/Sqrt/Div, attention with Shape/Gather/Concat/Reshape/Transpose,
tanh-GELU MLP) with 12, 48 and 192 layers and times import, export and the write
(median of ``--repeat`` runs, 5 by default); seconds per 1000 nodes should stay flat.
Part 2 times a full ``onnxopt.api.optimize`` round trip of a ~1,000-node model.
Part 3 writes a model with 16 external weights of 64 MiB (1 GiB, written in 4 MiB
chunks) and round-trips it through ``onnxopt.api.optimize(path, output=...)`` in a
fresh process, reporting that process's peak RSS (``VmHWM``, and ``ru_maxrss``,
which Linux inflates with the parent's peak): the weights are streamed, never
held, so it must stay under 300 MB. This part runs first, while the parent is small.

Temporary files go to benchmarks/_work/import_export/ (gitignored), removed at the end.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onnxopt.exporter import export_model_lazy, save_model
from onnxopt.importer import import_model

WORK = ROOT / "benchmarks" / "_work" / "import_export"  # only this is removed at the end
HIDDEN, HEADS, VOCAB = 16, 2, 64
F = TensorProto.FLOAT


class _Builder:
    """Nodes and initializers of a TorchScript-style GPT-2 export, with unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(0)
        self.n = 0

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        self.n += 1
        out = f"{op_type.lower()}_{self.n}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=f"{op_type}_{self.n}",
                                           **attrs))
        return out

    def weight(self, name: str, *shape: int) -> str:
        arr = (self.rng.standard_normal(shape) * 0.02).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def const(self, value, dtype=np.int64) -> str:
        self.n += 1
        name = f"c_{self.n}"
        self.inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def layer_norm(self, x: str, prefix: str) -> str:
        mean = self.op("ReduceMean", x, axes=[-1])
        d = self.op("Sub", x, mean)
        var = self.op("ReduceMean", self.op("Pow", d, self.const(2.0, np.float32)), axes=[-1])
        std = self.op("Sqrt", self.op("Add", var, self.const(1e-5, np.float32)))
        y = self.op("Mul", self.op("Div", d, std), self.weight(f"{prefix}.weight", HIDDEN))
        return self.op("Add", y, self.weight(f"{prefix}.bias", HIDDEN))

    def heads(self, x: str, batch: str, seq: str) -> str:
        shape = self.op("Concat", batch, seq, self.const([HEADS]), self.const([HIDDEN // HEADS]),
                        axis=0)
        return self.op("Transpose", self.op("Reshape", x, shape), perm=[0, 2, 1, 3])

    def attention(self, x: str, mask: str, prefix: str) -> str:
        shape = self.op("Shape", x)
        batch = self.op("Unsqueeze", self.op("Gather", shape, self.const(0), axis=0),
                        self.const([0]))
        seq = self.op("Unsqueeze", self.op("Gather", shape, self.const(1), axis=0),
                      self.const([0]))
        qkv = self.op("Add", self.op("MatMul", x, self.weight(f"{prefix}.c_attn.weight", HIDDEN,
                                                              3 * HIDDEN)),
                      self.weight(f"{prefix}.c_attn.bias", 3 * HIDDEN))
        q, k, v = (self.op("Slice", qkv, self.const([i * HIDDEN]), self.const([(i + 1) * HIDDEN]),
                           self.const([2])) for i in range(3))
        q, v = self.heads(q, batch, seq), self.heads(v, batch, seq)
        k = self.op("Transpose", self.heads(k, batch, seq), perm=[0, 1, 3, 2])
        scores = self.op("Div", self.op("MatMul", q, k),
                         self.const(float(np.sqrt(HIDDEN // HEADS)), np.float32))
        probs = self.op("Softmax", self.op("Add", scores, mask), axis=-1)
        ctx = self.op("Transpose", self.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        flat = self.op("Reshape", ctx, self.op("Concat", batch, seq, self.const([HIDDEN]), axis=0))
        return self.op("Add", self.op("MatMul", flat, self.weight(f"{prefix}.c_proj.weight", HIDDEN,
                                                                  HIDDEN)),
                       self.weight(f"{prefix}.c_proj.bias", HIDDEN))

    def mlp(self, x: str, prefix: str) -> str:
        h = self.op("Add", self.op("MatMul", x, self.weight(f"{prefix}.c_fc.weight", HIDDEN,
                                                            4 * HIDDEN)),
                    self.weight(f"{prefix}.c_fc.bias", 4 * HIDDEN))
        cube = self.op("Mul", self.op("Pow", h, self.const(3.0, np.float32)),
                       self.const(0.044715, np.float32))
        inner = self.op("Mul", self.op("Add", h, cube), self.const(0.7978846, np.float32))
        gelu = self.op("Mul", self.op("Mul", h, self.const(0.5, np.float32)),
                       self.op("Add", self.op("Tanh", inner), self.const(1.0, np.float32)))
        return self.op("Add", self.op("MatMul", gelu, self.weight(f"{prefix}.c_proj2.weight",
                                                                  4 * HIDDEN, HIDDEN)),
                       self.weight(f"{prefix}.c_proj2.bias", HIDDEN))


def gpt2_like(layers: int) -> onnx.ModelProto:
    """A GPT-2-shaped model with ``layers`` blocks (62 nodes each) and tiny weights."""
    b = _Builder()
    h = b.op("Gather", b.weight("wte", VOCAB, HIDDEN), "input_ids", axis=0)
    mask = b.op("Mul", b.op("Sub", b.const(1.0, np.float32),
                            b.op("Cast", b.op("Unsqueeze", "attention_mask", b.const([1, 2])),
                                 to=F)),
                b.const(-1e4, np.float32))
    for i in range(layers):
        p = f"h.{i}"
        h = b.op("Add", h, b.attention(b.layer_norm(h, f"{p}.ln_1"), mask, f"{p}.attn"))
        h = b.op("Add", h, b.mlp(b.layer_norm(h, f"{p}.ln_2"), f"{p}.mlp"))
    b.op("MatMul", b.layer_norm(h, "ln_f"), b.weight("lm_head", HIDDEN, VOCAB))
    b.nodes[-1].output[0] = "logits"
    graph = helper.make_graph(
        b.nodes, "gpt2_like",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", F, ["batch", "seq", VOCAB])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _median_time(fn, repeat: int, clock=time.perf_counter) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()  # the previous run's garbage is not this run's cost
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def time_round_trip(layers: int, repeat: int) -> dict:
    """Median seconds of import, export and write for a ``layers``-block model."""
    path = WORK / f"gpt2_like_{layers}.onnx"
    onnx.save_model(gpt2_like(layers), path)
    out = str(WORK / f"gpt2_like_{layers}.out.onnx")
    nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
    state: dict = {}

    def do_import():
        state["model"] = import_model(str(path))

    def do_export():
        state["proto"], state["external"] = export_model_lazy(state["model"])

    def do_save():
        save_model(state["proto"], state["external"], out)

    do_import(), do_export(), do_save()  # warm up (ORT probe for the IR version, caches)
    t_import = _median_time(do_import, repeat)
    t_export = _median_time(do_export, repeat)  # export does not change the IR
    t_save = _median_time(do_save, repeat)
    total = t_import + t_export + t_save
    # CPU time of this process too: on a shared machine it is much steadier than wall time.
    cpu = sum(_median_time(fn, repeat, time.process_time) for fn in (do_import, do_export, do_save))
    print(f"{layers:4d} layers {nodes:6d} nodes: import {t_import:6.3f} s  export "
          f"{t_export:6.3f} s  write {t_save:6.3f} s  total {total:6.3f} s  "
          f"= {total / nodes * 1000:.3f} s / 1000 nodes (CPU {cpu / nodes * 1000:.3f})",
          flush=True)
    return {"layers": layers, "nodes": nodes, "import_s": t_import, "export_s": t_export,
            "save_s": t_save, "total_s": total, "per_1000": total / nodes * 1000,
            "cpu_per_1000": cpu / nodes * 1000}


def scaling(layer_counts: list[int], repeat: int) -> list[dict]:
    return [time_round_trip(layers, repeat) for layers in layer_counts]


def small_round_trip(repeat: int) -> tuple[int, float]:
    import onnxopt.api

    per_layer = len(gpt2_like(2).graph.node) - len(gpt2_like(1).graph.node)
    layers = max(1, round((1000 - len(gpt2_like(0).graph.node)) / per_layer))
    path = WORK / "gpt2_like_1k.onnx"
    onnx.save_model(gpt2_like(layers), path)
    nodes = len(onnx.load(str(path)).graph.node)
    out = str(WORK / "gpt2_like_1k.out.onnx")
    onnxopt.api.optimize(str(path), output=out, fuse=False)
    t = _median_time(lambda: onnxopt.api.optimize(str(path), output=out, fuse=False), repeat)
    print(f"round trip of a {nodes}-node model (onnxopt.api.optimize, --no-fuse): {t:.3f} s",
          flush=True)
    return nodes, t


def big_model(gib: float, tensors: int = 16) -> Path:
    """A model whose ``tensors`` weights (``gib`` GiB in all) lie in one external file."""
    folder = WORK / "big"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    nbytes = int(gib * (1 << 30)) // tensors
    rows = nbytes // (4 * 1024)
    chunk = np.arange(1 << 20, dtype=np.float32).tobytes()  # 4 MiB, written again and again
    inits, nodes, acc = [], [], None
    offset = 0
    with open(folder / "weights.bin", "wb") as f:
        for i in range(tensors):
            size = rows * 4 * 1024
            left = size
            while left:
                part = chunk[: min(len(chunk), left)]
                f.write(part)
                left -= len(part)
            t = TensorProto(name=f"w{i}", data_type=F, dims=[rows, 1024],
                            data_location=TensorProto.EXTERNAL)
            for key, value in (("location", "weights.bin"), ("offset", str(offset)),
                               ("length", str(size))):
                t.external_data.add(key=key, value=value)
            inits.append(t)
            offset += size
            g = f"g{i}"
            nodes.append(helper.make_node("Gather", [f"w{i}", "ids"], [g], axis=0))
            if acc is not None:
                nodes.append(helper.make_node("Add", [acc, g], [f"s{i}"]))
                g = f"s{i}"
            acc = g
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "big",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
                              [helper.make_tensor_value_info("y", F, ["n", 1024])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save_model(model, folder / "big.onnx")
    return folder / "big.onnx"


# Peak RSS of the child itself. Linux carries a parent's high-water mark into a child's
# ru_maxrss across fork/exec (a child of a 500 MB process reports 500 MB though it used 13),
# so VmHWM, which belongs to the child's own address space, is read where it exists; the
# benchmark also runs this part first, while the parent is still small.
_RSS_SCRIPT = textwrap.dedent("""
    import resource, sys, time
    sys.path.insert(0, {root!r})

    def peak_mb():
        try:
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
        except (OSError, StopIteration):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    import onnxopt.api
    base = peak_mb()
    start = time.perf_counter()
    onnxopt.api.optimize({src!r}, output={out!r}, fuse=False)
    took = time.perf_counter() - start
    print(base, peak_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, took)
""")


def big_round_trip(gib: float) -> dict:
    start = time.perf_counter()
    src = big_model(gib)
    wrote = time.perf_counter() - start
    out = src.parent / "big.opt.onnx"
    script = _RSS_SCRIPT.format(root=str(ROOT), src=str(src), out=str(out))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    base, peak, maxrss, took = map(float, done.stdout.split())
    data = src.parent / "big.opt.onnx.data"
    size_in, size_out = os.path.getsize(src.parent / "weights.bin"), os.path.getsize(data)
    same = _same_bytes(src.parent / "weights.bin", data)
    print(f"{size_in / (1 << 30):.2f} GiB external weights (written in {wrote:.1f} s): "
          f"onnxopt.api.optimize round trip {took:.2f} s, peak RSS {peak:.0f} MB "
          f"(ru_maxrss {maxrss:.0f} MB; after imports {base:.0f} MB); output data "
          f"{size_out / (1 << 30):.2f} GiB, bytes {'identical' if same else 'DIFFER'}", flush=True)
    return {"gib": size_in / (1 << 30), "seconds": took, "peak_mb": peak, "maxrss_mb": maxrss,
            "base_mb": base, "same": same}


def _same_bytes(a: Path, b: Path, chunk: int = 1 << 24) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if x != y:
                return False
            if not x:
                return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[12, 48, 192])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--big-gib", type=float, default=1.0,
                        help="GiB of external weights for the memory check (0 to skip)")
    parser.add_argument("--keep", action="store_true", help="keep benchmarks/_work/import_export/")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    print(f"python {platform.python_version()}, onnx {onnx.__version__}, {os.cpu_count()} CPUs, "
          f"{platform.platform()}", flush=True)
    try:
        big = big_round_trip(args.big_gib) if args.big_gib > 0 else None
        rows = scaling(args.layers, args.repeat)
        for key, what in (("per_1000", "wall"), ("cpu_per_1000", "CPU")):
            lo, hi = min(r[key] for r in rows), max(r[key] for r in rows)
            print(f"{what} seconds per 1000 nodes: {lo:.3f} to {hi:.3f} (ratio {hi / lo:.2f})")
        small_round_trip(args.repeat)
        if big is not None and big["peak_mb"] >= 300:
            print("peak RSS is over the 300 MB budget", file=sys.stderr)
            sys.exit(1)
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
