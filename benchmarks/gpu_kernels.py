"""Our CUDA kernels against PyTorch on the same GPU; prints markdown tables.

    python benchmarks/gpu_kernels.py [--quick] [--out DIR]

Attention: kernels/flash_attention.cu vs torch.nn.functional.scaled_dot_product_attention (its
default dispatch, and forced to the FlashAttention-2 backend), B=4, H=16, S in {1024, 4096,
16384}, D in {32, 64, 80, 96, 128, 256} ({64, 128} with --quick), bf16 and fp16, causal and not. TFLOP/s counts 4*B*H*S*S*D, halved when
causal. Each row also gives our max |error| against SDPA's output, so a fast wrong kernel shows.

Decode steps: one query row against a cache of 1,024-16,384 keys, D=128, GQA (32/8 heads) and
not (32/32), batch 1 and 4; microseconds and GB/s of the cache read, against SDPA.

Norms and activations: GB/s (bytes read + written once) against a device-to-device copy of the
same size, and against the PyTorch equivalent.

Times are medians over replays of a CUDA graph holding several launches (no launch overhead);
if capture fails the launches are timed eagerly and the row says so. Device pointers are torch
tensors' data_ptr() and the stream is torch's current stream, so both share the primary context.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnxopt.runtime import cuda as kernels

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def stream() -> int:
    return torch.cuda.current_stream().cuda_stream


def bench(fn, *, inner: int = 5, reps: int = 7) -> tuple[float, str]:
    """Median milliseconds per call of fn (which launches on torch's current stream)."""
    fn()  # load / compile / warm up outside any capture
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()  # a warm-up on the capture stream, as torch recommends
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            for _ in range(inner):
                fn()
        run, how = graph.replay, "graph"
    except Exception as error:  # noqa: BLE001 - fall back to eager timing, and say so
        print(f"  (graph capture failed: {error}; timing eagerly)", file=sys.stderr)

        def run():
            for _ in range(inner):
                fn()

        how = "eager"
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times), how


def sdpa_flash(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def sdpa_math(q, k, v, causal: bool, gqa: bool = False):
    """SDPA's math backend: MatMul, softmax, MatMul as separate kernels, which is what a
    model's own decomposition runs (the stand-in for "the decomposition" in the cost model)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


# The math backend holds the [B, H, S, S] scores (4 GiB at S=16384 in 16-bit, several copies):
# timed up to this length.
MATH_MAX_S = 4096


def attention_case(q, k, v, o, causal: bool, dtype_name: str) -> dict:
    b, h, s, d = q.shape
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    inner = max(1, min(10, int(2e12 // flops)))

    def ours():
        kernels.flash_attention(
            q.data_ptr(),
            k.data_ptr(),
            v.data_ptr(),
            o.data_ptr(),
            b,
            h,
            h,
            s,
            s,
            d,
            None,
            causal,
            dtype_name,
            stream(),
        )

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    t_ours, how = bench(ours, inner=inner)
    err = (o.float() - sdpa().float()).abs().max().item()
    t_sdpa, _ = bench(sdpa, inner=inner)
    try:
        t_fa2, _ = bench(lambda: sdpa_flash(q, k, v, causal), inner=inner)
    except Exception as error:  # noqa: BLE001 - report the rest without this column
        print(f"  (SDPA flash backend unavailable: {error})", file=sys.stderr)
        t_fa2 = math.nan
    t_math = bench(lambda: sdpa_math(q, k, v, causal), inner=inner)[0] if s <= MATH_MAX_S \
        else math.nan
    row = {
        "dtype": dtype_name,
        "D": d,
        "S": s,
        "causal": causal,
        "ours_ms": t_ours,
        "ours_tflops": flops / t_ours / 1e9,
        "sdpa_ms": t_sdpa,
        "sdpa_tflops": flops / t_sdpa / 1e9,
        "sdpa_flash_tflops": flops / t_fa2 / 1e9,
        "ratio_vs_sdpa": t_sdpa / t_ours,
        "ratio_vs_flash": t_fa2 / t_ours,
        "ratio_vs_math": t_math / t_ours,
        "max_abs_err": err,
        "timing": how,
    }
    print(
        f"  attn {dtype_name} D={d} S={s} causal={causal}: {row['ours_tflops']:.0f} TF/s vs "
        f"SDPA {row['sdpa_tflops']:.0f} ({row['ratio_vs_sdpa']:.2f}x), err {err:.2e}",
        file=sys.stderr,
    )
    return row


def attention_rows(quick: bool) -> list[dict]:
    rows = []
    b, h = 4, 16
    for dtype_name, dtype in DTYPES.items():
        for d in (64, 128) if quick else (32, 64, 80, 96, 128, 256):
            for s in (1024, 4096) if quick else (1024, 4096, 16384):
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
                o = torch.empty_like(q)
                for causal in (False, True):
                    rows.append(attention_case(q, k, v, o, causal, dtype_name))
                torch.cuda.empty_cache()
    return rows


def decode_case(b: int, h: int, hkv: int, skv: int, d: int, dtype_name: str) -> dict:
    """One query row per sequence against a cache of ``skv`` keys (a decode step): bound by
    reading K and V, so the figure is GB/s of the cache read, against SDPA on the same tensors
    (``enable_gqa`` where the cache has fewer heads)."""
    dtype = DTYPES[dtype_name]
    q = torch.randn(b, h, 1, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(b, hkv, skv, d, device="cuda", dtype=dtype) for _ in range(2))
    o = torch.empty_like(q)
    cache_bytes = 2 * k.numel() * k.element_size()

    def ours():  # causal with the query at the end: it sees every key
        kernels.flash_attention(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), b, h,
                                hkv, 1, skv, d, None, True, dtype_name, stream())

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=hkv != h)

    t_ours, how = bench(ours, inner=10)
    err = (o.float() - sdpa().float()).abs().max().item()
    t_sdpa, _ = bench(sdpa, inner=10)
    t_math, _ = bench(lambda: sdpa_math(q, k, v, False, hkv != h), inner=10)
    row = {"dtype": dtype_name, "B": b, "H": h, "Hkv": hkv, "Skv": skv, "D": d,
           "ours_us": t_ours * 1e3, "sdpa_us": t_sdpa * 1e3, "math_us": t_math * 1e3,
           "ratio_vs_math": t_math / t_ours,
           "ours_gbs": cache_bytes / t_ours / 1e6, "sdpa_gbs": cache_bytes / t_sdpa / 1e6,
           "ratio_vs_sdpa": t_sdpa / t_ours, "max_abs_err": err, "timing": how}
    print(f"  decode {dtype_name} B={b} H={h}/{hkv} Skv={skv}: {row['ours_us']:.1f} us "
          f"({row['ours_gbs']:.0f} GB/s) vs SDPA {row['sdpa_us']:.1f} us "
          f"({row['ratio_vs_sdpa']:.2f}x), err {err:.2e}", file=sys.stderr)
    return row


def decode_rows(quick: bool) -> list[dict]:
    rows = []
    for dtype_name in ("float16",) if quick else DTYPES:
        for b, h, hkv in ((1, 32, 8), (4, 32, 8), (4, 32, 32)):
            for skv in (1024, 4096, 16384):
                rows.append(decode_case(b, h, hkv, skv, 128, dtype_name))
                torch.cuda.empty_cache()
    return rows


def memory_cases(n_rows: int, hidden: int, dtype_name: str) -> list[dict]:
    dtype = {**DTYPES, "float32": torch.float32}[dtype_name]
    x = torch.randn(n_rows, hidden, device="cuda", dtype=dtype)
    r = torch.randn_like(x)
    g = torch.randn(hidden, device="cuda", dtype=dtype)
    bias = torch.randn(hidden, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    s_out = torch.empty_like(x)
    gu = torch.randn(n_rows, 2 * hidden, device="cuda", dtype=dtype)
    nbytes = x.numel() * x.element_size()
    t_copy, _ = bench(lambda: y.copy_(x))
    copy_gbs = 2 * nbytes / t_copy / 1e6
    xp, rp, gp, bp, yp, sp, gup = (t.data_ptr() for t in (x, r, g, bias, y, s_out, gu))
    n, dt = n_rows, dtype_name
    cases = [
        (
            "layer_norm",
            2,
            lambda: kernels.layer_norm(xp, gp, bp, yp, n, hidden, 1e-5, dt, stream()),
            lambda: F.layer_norm(x, (hidden,), g, bias, 1e-5),
        ),
        (
            "layer_norm+residual+sum",
            4,
            lambda: kernels.layer_norm(
                xp, gp, bp, yp, n, hidden, 1e-5, dt, stream(), residual_ptr=rp, sum_out_ptr=sp
            ),
            lambda: F.layer_norm(x + r, (hidden,), g, bias, 1e-5),
        ),
        (
            "rms_norm",
            2,
            lambda: kernels.rms_norm(xp, gp, yp, n, hidden, 1e-6, dt, stream()),
            lambda: F.rms_norm(x, (hidden,), g, 1e-6),
        ),
        (
            "bias_gelu(erf)",
            2,
            lambda: kernels.bias_gelu(xp, bp, yp, n, hidden, "none", dt, stream()),
            lambda: F.gelu(x + bias),
        ),
        (
            "bias_gelu(tanh)",
            2,
            lambda: kernels.bias_gelu(xp, bp, yp, n, hidden, "tanh", dt, stream()),
            lambda: F.gelu(x + bias, approximate="tanh"),
        ),
        (
            "swiglu(split halves)",
            3,
            lambda: kernels.swiglu_fused(gup, yp, n, hidden, dt, stream()),
            lambda: F.silu(gu[:, :hidden]) * gu[:, hidden:],
        ),
    ]
    rows = []
    for name, passes, ours, theirs in cases:
        t_ours, how = bench(ours)
        t_torch, _ = bench(theirs)
        gbs = passes * nbytes / t_ours / 1e6
        rows.append(
            {
                "op": name,
                "dtype": dtype_name,
                "rows": n_rows,
                "hidden": hidden,
                "ours_ms": t_ours,
                "ours_gbs": gbs,
                "copy_gbs": copy_gbs,
                "of_copy": gbs / copy_gbs,
                "torch_ms": t_torch,
                "speedup_vs_torch": t_torch / t_ours,
                "timing": how,
            }
        )
        print(
            f"  {name} {dtype_name} {hidden}: {gbs:.0f} GB/s ({gbs / copy_gbs:.0%} of copy)",
            file=sys.stderr,
        )
    return rows


def memory_rows(quick: bool) -> list[dict]:
    rows = []
    for dtype_name in ("bfloat16", "float16", "float32"):
        for hidden in (4096, 8192):
            rows += memory_cases(8192 if quick else 16384, hidden, dtype_name)
            torch.cuda.empty_cache()
    return rows


def decode_markdown(rows: list[dict]) -> list[str]:
    out = ["", "## Decode steps (one query row, D=128, causal at the end of the cache)", "",
           ("| dtype | B | H/Hkv | Skv | ours us | SDPA us | math us | ours GB/s | SDPA GB/s "
            "| ours/SDPA | ours/math | max abs err | timing |"),
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['dtype']} | {r['B']} | {r['H']}/{r['Hkv']} | {r['Skv']} | "
                   f"{r['ours_us']:.1f} | {r['sdpa_us']:.1f} | {r['math_us']:.1f} | "
                   f"{r['ours_gbs']:.0f} | {r['sdpa_gbs']:.0f} | {r['ratio_vs_sdpa']:.2f} | "
                   f"{r['ratio_vs_math']:.2f} | {r['max_abs_err']:.2e} | {r['timing']} |")
    return out


def markdown(att: list[dict], mem: list[dict], header: str,
             dec: list[dict] | None = None) -> str:
    out = [header, "", "## Attention (B=4, H=16, Sq=Skv=S)", ""]
    out.append(
        "| dtype | D | S | causal | ours TFLOP/s | SDPA TFLOP/s | SDPA-flash TFLOP/s | "
        "ours/SDPA | ours/flash | ours/math | max abs err | timing |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in att:
        out.append(
            f"| {r['dtype']} | {r['D']} | {r['S']} | {r['causal']} | {r['ours_tflops']:.1f} | "
            f"{r['sdpa_tflops']:.1f} | {r['sdpa_flash_tflops']:.1f} | {r['ratio_vs_sdpa']:.2f} | "
            f"{r['ratio_vs_flash']:.2f} | {r['ratio_vs_math']:.2f} | {r['max_abs_err']:.2e} | "
            f"{r['timing']} |"
        )
    if dec:
        out += decode_markdown(dec)
    out += ["", "## Norms and activations (bytes read + written once)", ""]
    out.append(
        "| op | dtype | rows x hidden | ours GB/s | copy GB/s | of copy | vs torch | timing |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    for r in mem:
        out.append(
            f"| {r['op']} | {r['dtype']} | {r['rows']}x{r['hidden']} | {r['ours_gbs']:.0f} | "
            f"{r['copy_gbs']:.0f} | {r['of_copy']:.0%} | {r['speedup_vs_torch']:.2f}x | "
            f"{r['timing']} |"
        )
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes")
    parser.add_argument("--out", type=Path, help="write gpu_kernels.md and gpu_kernels.json here")
    parser.add_argument("--only", choices=["attention", "decode", "memory"],
                        help="run one part")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    torch.cuda.init()  # the primary context is current from here on; our launches use it
    props = torch.cuda.get_device_properties(0)
    header = (
        f"# gpu_kernels: {props.name}, {props.multi_processor_count} SMs, torch "
        f"{torch.__version__} (CUDA {torch.version.cuda})"
    )
    att = attention_rows(args.quick) if args.only in (None, "attention") else []
    dec = decode_rows(args.quick) if args.only in (None, "decode") else []
    mem = memory_rows(args.quick) if args.only in (None, "memory") else []
    text = markdown(att, mem, header, dec)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_kernels.md").write_text(text)
        (args.out / "gpu_kernels.json").write_text(
            json.dumps({"device": props.name, "attention": att, "decode": dec, "memory": mem},
                       indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
