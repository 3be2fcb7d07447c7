"""End to end on a GPU: models optimized for CUDA, run in ONNX Runtime on onnxopt's kernels.

    python benchmarks/gpu_e2e.py [--out DIR] [--quick]

Each case is optimized for this device (``target="cuda"``, its compute capability), must
contain ``ai.onnxopt.cuda`` ops, and is run

- through ORT's CUDA provider with the ops' CUDA kernels (device pointers, ORT's stream),
  when this onnxruntime build has one; and in any case
- through ORT's CPU provider with the *staged* registry (``onnxopt.runtime.ops.staged``):
  every op copies its inputs to the device, launches the same CUDA kernel function,
  synchronises and copies back. The GPU check machine has onnxruntime 1.30 CPU, so this is
  what runs there.

Outputs are compared with the original model in ORT (CPU; for bfloat16, which ORT's CPU
MatMul lacks, with the optimized model on the ops' float64 reference kernels). Figures, kept
apart because they measure different things:

- ``e2e ms``: median ``session.run`` of the optimized model (staged: includes the copies and
  one synchronisation per op);
- ``staged kernel ms``: the part of that spent launching + synchronising (host clock, mean
  per run), ``upload``/``download`` the copies;
- ``kernel-only ms``: the attention kernel alone on device buffers, launched back to back on
  one stream and timed over many launches (no copies, no per-launch sync), with TFLOP/s;
- ``ORT CPU original ms``: the unoptimized model on ORT's CPU provider, for scale.

Writes ``gpu_e2e.md`` and ``gpu_e2e.json`` to ``--out``; exits 1 if any output is wrong.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.runtime import DeviceTensor, KernelContext, cuda_available, session
from onnxopt.runtime.ops import DOMAIN
from onnxopt.runtime.ops import attention as attn_ops
from onnxopt.runtime.ops.examples import attention_feeds, attention_model
from onnxopt.runtime.ops.staged import TIMES, staged_registry
from onnxopt.verification.inputs import make_inputs

ROOT = Path(__file__).resolve().parents[1]
TOL = {"float16": 5e-3, "bfloat16": 3e-2, "float32": 1e-4}


def median_ms(fn, reps: int, *, warm_up: bool = True) -> float:
    if warm_up:
        fn()  # compiles / loads kernels on first use
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not np.isfinite(got).all():
        return math.inf
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))


def cases(quick: bool) -> list[dict]:
    """Each: name, model, feeds, dtype, the reference (model and feeds run on ORT's CPU
    provider, or None: the optimized model on our reference kernels) and the attention shape
    to time the kernel alone (or None)."""
    big = (2, 512) if quick else (4, 1024)
    out = []
    for heads, kv, d, causal, padding in [(16, 4, 64, True, True), (16, 16, 128, False, True),
                                          (16, 4, 128, True, False)]:
        model = attention_model(heads=heads, kv_heads=kv, head_size=d, causal=causal,
                                padding=padding)
        # The reference is the same graph in float32 on the same (exactly widened) inputs:
        # ORT's float32 CPU MatMul is fast, its float16 one is not.
        wide = attention_model(heads=heads, kv_heads=kv, head_size=d, causal=causal,
                               padding=padding, dtype="float32")
        tag = f"attention fp16 H{heads}/{kv} D{d}{' causal' if causal else ''}" + (
            " padding" if padding else "")
        b, s = big
        for bb, ss, pads, shape in [  # ragged (no tile multiple, padded rows), then large
                (2, 197, (0, 61), None),
                (b, s, tuple(s // (3 + i) if i % 2 else 0 for i in range(b)),
                 (b, heads, kv, s, s, d, causal, "float16"))]:
            feeds = attention_feeds(model, bb, ss, pad=pads if padding else ())
            wide_feeds = {k: v.astype(np.float32) if v.dtype == np.float16 else v
                          for k, v in feeds.items()}
            out.append({"name": f"{tag} B{bb} S{ss}", "model": model, "feeds": feeds,
                        "dtype": "float16", "reference": (wide, wide_feeds), "shape": shape})
    # bfloat16: the pipeline does not fold bfloat16 constants (so does not fuse), and ORT's
    # CPU provider has no bfloat16 MatMul: the FlashAttention node is written directly and
    # compared with its float64 reference kernel. Smaller: that reference is NumPy.
    b, s = (1, 256) if quick else (2, 512)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(shape).astype(np.float32)
             for n, shape in [("q", (b, 16, s, 128)), ("k", (b, 4, s, 128)),
                              ("v", (b, 4, s, 128))]}
    out.append({"name": f"FlashAttention node bf16 H16/4 D128 causal B{b} S{s}",
                "model": bf16_attention(), "feeds": feeds, "dtype": "bfloat16",
                "reference": None, "shape": (b, 16, 4, s, s, 128, True, "bfloat16")})
    for name in ("gpt2.ts", "llama.dynamo", "bert.dynamo"):
        model = onnx.load(str(ROOT / "models" / f"{name}.onnx"))
        feeds = make_inputs(model, {"batch": 2, "other": 64}, seed=0)
        out.append({"name": f"{name} (float32)", "model": model, "feeds": feeds,
                    "dtype": "float32", "reference": (model, feeds), "shape": None})
    return out


def bf16_attention() -> onnx.ModelProto:
    """float32 in and out, the FlashAttention node in bfloat16 between Casts."""
    text = f"""<ir_version: 10, opset_import: ["": 18, "{DOMAIN}": 1]>
    g (float[B,16,S,128] q, float[B,4,S,128] k, float[B,4,S,128] v) => (float[B,16,S,128] o) {{
      qb = Cast<to=16>(q)
      kb = Cast<to=16>(k)
      vb = Cast<to=16>(v)
      ob = {DOMAIN}.FlashAttention <kernel="fa_tc_bf16_d128_bm128_bn64", tile_m=128, tile_n=64,
                                    warps=8, scale=0.08838834764831845, causal=1> (qb, kb, vb)
      o = Cast<to=1>(ob)
    }}"""
    model = onnx.parser.parse_model(text)
    model.ir_version = 10
    return model


def kernel_only(shape, stream_reps: int) -> dict:
    """The attention kernel alone on device buffers: ms per launch and TFLOP/s."""
    from onnxopt.runtime.cuda import loader
    from onnxopt.runtime.cuda import pycuda_backend as pyc

    b, h, hkv, sq, skv, d, causal, dtype = shape
    np_dtype = {"float16": np.float16, "bfloat16": np.uint16}[dtype]
    item = np.dtype(np_dtype).itemsize
    sizes = [b * h * sq * d, b * hkv * skv * d, b * hkv * skv * d, b * h * sq * d]
    loader.ensure_context()
    allocations = [pyc.mem_alloc(n * item) for n in sizes]
    ends = pyc.mem_alloc(4 * b)
    pyc.memcpy_htod(int(ends), np.full(b, skv, np.int32))
    for a, n in zip(allocations, sizes):
        pyc.memset_d8(int(a), 0x3C if dtype == "float16" else 0x3F, n * item)  # ~1.0, finite
    pyc.synchronize()  # the copies and memsets above, before launches on another stream
    stream = pyc.driver().Stream()
    t = [DeviceTensor(int(a), s, np.dtype(np_dtype)) for a, s in zip(allocations, [
        (b, h, sq, d), (b, hkv, skv, d), (b, hkv, skv, d), (b, h, sq, d)])]
    ends_t = DeviceTensor(int(ends), (b,), np.dtype(np.int32))
    q, k, v, o = t
    if dtype == "bfloat16":  # DeviceTensor's dtype names the kernel's dtype
        import ml_dtypes

        q, k, v, o = (DeviceTensor(x.ptr, x.shape, np.dtype(ml_dtypes.bfloat16)) for x in t)

    def launch():
        attn_ops.attention_cuda(KernelContext(stream.handle), q, k, v, None, None, ends_t,
                                out=o, scale=d ** -0.5, causal=int(causal))

    try:
        launch()
        stream.synchronize()
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(stream_reps):
                launch()
            stream.synchronize()
            best = min(best, (time.perf_counter() - start) * 1e3 / stream_reps)
        flops = 4 * b * h * sq * skv * d * (0.5 if causal else 1.0)
        return {"kernel_only_ms": best, "kernel_tflops": flops / best / 1e9}
    finally:
        stream.synchronize()
        for a in [*allocations, ends]:
            a.free()


def run_case(case: dict, reps: int, staged) -> dict:
    model, feeds, dtype, shape = case["model"], case["feeds"], case["dtype"], case["shape"]
    row: dict = {"case": case["name"]}
    already = any(n.domain == DOMAIN for n in model.graph.node)
    optimized = model if already else run_pipeline(model, OptimizeOptions(target="cuda")).proto
    ops = sorted({n.op_type for n in optimized.graph.node if n.domain == DOMAIN})
    row["ops"] = ", ".join(ops)
    if not ops:
        raise AssertionError("the optimized model has no ai.onnxopt.cuda op")
    cpu = ["CPUExecutionProvider"]
    if case["reference"] is None:
        (want,) = session(optimized, providers=cpu).run(None, feeds)
    else:
        ref_model, ref_feeds = case["reference"]
        reference = ort.InferenceSession(ref_model.SerializeToString(), providers=cpu)
        (want,) = reference.run(None, ref_feeds)
        if shape is None:  # for scale, on the small cases only
            row["ort_cpu_original_ms"] = median_ms(lambda: reference.run(None, ref_feeds), 3)

    sess = session(optimized, providers=cpu, registry=staged)
    (got,) = sess.run(None, feeds)
    row["staged_rel_err"] = rel_err(got, want)
    row["ok"] = row["staged_rel_err"] < TOL[dtype]
    TIMES.reset()  # after the first run, which compiled and loaded the kernels
    row["e2e_staged_ms"] = median_ms(lambda: sess.run(None, feeds), reps, warm_up=False)
    row["staged_kernel_ms"] = TIMES.kernel * 1e3 / reps  # means per run
    row["staged_upload_ms"] = TIMES.upload * 1e3 / reps
    row["staged_download_ms"] = TIMES.download * 1e3 / reps
    row["staged_ops_per_run"] = TIMES.calls // reps

    if cuda_available.available():  # ORT's CUDA provider with the CUDA kernels
        cuda = session(optimized, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
        (got,) = cuda.run(None, feeds)
        row["cuda_ep_rel_err"] = rel_err(got, want)
        row["ok"] = row["ok"] and row["cuda_ep_rel_err"] < TOL[dtype]
        row["e2e_cuda_ep_ms"] = median_ms(lambda: cuda.run(None, feeds), reps)
    if shape is not None:
        row.update(kernel_only(shape, 20 if reps > 5 else 5))
    return row


def markdown(rows, env) -> str:
    cols = ["case", "ops", "ok", "staged_rel_err", "e2e_staged_ms", "staged_kernel_ms",
            "staged_upload_ms", "staged_download_ms", "kernel_only_ms", "kernel_tflops",
            "e2e_cuda_ep_ms", "ort_cpu_original_ms", "error"]
    used = [c for c in cols if any(c in r for r in rows)]
    lines = [(f"GPU end to end ({env['date']}, {env['device']}, onnxruntime {env['ort']} "
             f"{'with' if env['cuda_ep'] else 'without'} CUDAExecutionProvider)"), "",
             "| " + " | ".join(used) + " |", "|" + "---|" * len(used)]
    for r in rows:
        cells = []
        for c in used:
            v = r.get(c, "")
            cells.append(f"{v:.3g}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "_work" / "gpu_e2e"))
    parser.add_argument("--quick", action="store_true", help="smaller shapes, fewer runs")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reason = cuda_available.device_unavailable_reason()
    if reason is not None:
        print(f"gpu_e2e: cannot run: {reason}", file=sys.stderr)
        return 1
    from onnxopt.runtime.cuda import loader

    limits = loader.device_limits()
    env = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "device": f"sm_{''.join(map(str, limits.compute_capability))}, "
                     f"{limits.sm_count} SMs, {limits.smem_optin // 1024} KiB smem/block",
           "ort": ort.__version__, "cuda_ep": cuda_available.available()}
    reps = 3 if args.quick else 10
    staged = staged_registry()
    rows = []
    for case in cases(args.quick):
        print(f"# {case['name']}", flush=True)
        try:
            row = run_case(case, reps, staged)
        except Exception as error:  # noqa: BLE001 - record it, go on with the next case
            traceback.print_exc()
            row = {"case": case["name"], "ok": False,
                   "error": f"{type(error).__name__}: {error}"[:300]}
        print(json.dumps(row, default=str), flush=True)
        rows.append(row)
    (out / "gpu_e2e.json").write_text(json.dumps({"env": env, "rows": rows}, indent=2,
                                                 default=str))
    table = markdown(rows, env)
    (out / "gpu_e2e.md").write_text(table)
    print(table)
    bad = [r["case"] for r in rows if not r.get("ok")]
    print(f"gpu_e2e: {len(rows) - len(bad)}/{len(rows)} cases ok" + (
        f"; FAILED: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
