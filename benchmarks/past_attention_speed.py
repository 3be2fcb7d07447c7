"""One decode step's attention block with a key/value cache: ORT's MultiHeadAttention with
past/present against the decomposition onnxopt emits, side by side, interleaved.

Both read the projections packed ([B, S, H*D]), the cache BNSH ([B, H, P, D]) and the exact
additive mask [B, 1, 1, P+S] (0 / float min), and write the attention packed plus the two
present caches [B, H, P+S, D]:

- ``decomposition``: Reshape/Transpose to heads, Concat(past, new) on the sequence axis (the
  present outputs), MatMul(Q, Kᵀ), Mul(scale), Add(mask), Softmax, MatMul(V), head merge;
- ``mha_past``: ``com.microsoft.MultiHeadAttention`` with ``past_key``/``past_value``, the
  mask expanded to [B, 1, S, P+S] as ``attention_bias``, ``present_key``/``present_value``.

ORT CPU, 1 intra-op thread, no spinning. Per cell, ``--trials`` passes with fresh sessions,
each ``--runs`` rounds of one run of each variant (order alternating); a round's ratio is
decomposition time / MHA time; a pass's ratio is the median of its rounds; the cell's figure
is the median of the passes.

    python benchmarks/past_attention_speed.py [--heads 8 --head-size 64 --runs 200 --trials 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import parser

CELLS = {"decode_b1_p127": (1, 1, 127), "decode_b1_p1023": (1, 1, 1023),
         "decode_b4_p511": (4, 1, 511), "decode_b1_p4095": (1, 1, 4095),
         "prefill_b1_s128": (1, 128, 0)}

HEAD = """
<ir_version: 10, opset_import: ["" : 18, "com.microsoft" : 1]>
g (float[B, S, {hd}] q, float[B, S, {hd}] k, float[B, S, {hd}] v,
   float[B, {h}, P, {d}] past_k, float[B, {h}, P, {d}] past_v, float[B, 1, 1, T] mask)
  => (float[B, S, {hd}] o, float[B, {h}, T, {d}] present_k, float[B, {h}, T, {d}] present_v)
"""

# What onnxopt's decomposition is: K concatenated BNSH (the present output), MatMul with Kᵀ.
DECOMPOSITION = HEAD + """{{
  split = Constant <value = int64[4] {{0, 0, {h}, {d}}}> ()
  merge = Constant <value = int64[3] {{0, 0, {hd}}}> ()
  scale = Constant <value_float = {scale}> ()
  q4 = Reshape (q, split)
  k4 = Reshape (k, split)
  v4 = Reshape (v, split)
  qh = Transpose <perm = [0, 2, 1, 3]> (q4)
  kh = Transpose <perm = [0, 2, 1, 3]> (k4)
  vh = Transpose <perm = [0, 2, 1, 3]> (v4)
  present_k = Concat <axis = 2> (past_k, kh)
  present_v = Concat <axis = 2> (past_v, vh)
  kt = Transpose <perm = [0, 1, 3, 2]> (present_k)
  s = MatMul (qh, kt)
  ss = Mul (s, scale)
  sm = Add (ss, mask)
  p = Softmax <axis = -1> (sm)
  oh = MatMul (p, present_v)
  ot = Transpose <perm = [0, 2, 1, 3]> (oh)
  o = Reshape (ot, merge)
}}
"""

MHA = HEAD + """{{
  one = Constant <value = int64[2] {{1, 1}}> ()
  start = Constant <value = int64[1] {{1}}> ()
  end = Constant <value = int64[1] {{2}}> ()
  qshape = Shape (q)
  sq = Slice (qshape, start, end)
  mshape = Shape (mask)
  t0 = Constant <value = int64[1] {{3}}> ()
  t1 = Constant <value = int64[1] {{4}}> ()
  tl = Slice (mshape, t0, t1)
  sizes = Concat <axis = 0> (one, sq, tl)
  bias = Expand (mask, sizes)
  o, present_k, present_v = com.microsoft.MultiHeadAttention <num_heads = {h}, scale = {scale}>
      (q, k, v, , , bias, past_k, past_v)
}}
"""

VARIANTS = {"decomposition": DECOMPOSITION, "mha_past": MHA}


def _session(text: str) -> ort.InferenceSession:
    model = parser.parse_model(text)
    onnx.checker.check_model(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _feeds(batch: int, seq: int, past: int, h: int, d: int) -> dict:
    rng = np.random.default_rng(0)
    total = past + seq
    mask = np.zeros((batch, 1, 1, total), np.float32)
    for r in range(1, batch):  # padding in every row but the first, left and right alternately
        pad = 1 + r * total // (4 * batch)
        mask[r, ..., :pad] = np.finfo(np.float32).min if r % 2 else 0
        if r % 2 == 0:
            mask[r, ..., total - pad - 1:total - 1] = np.finfo(np.float32).min
    feeds = {n: rng.standard_normal((batch, seq, h * d)).astype(np.float32) for n in "qkv"}
    feeds |= {n: rng.standard_normal((batch, h, past, d)).astype(np.float32)
              for n in ("past_k", "past_v")}
    feeds["mask"] = mask
    return feeds


def run_cell(batch: int, seq: int, past: int, h: int, d: int, runs: int, trials: int) -> dict:
    feeds = _feeds(batch, seq, past, h, d)
    texts = {n: t.format(h=h, d=d, hd=h * d, scale=1 / d ** 0.5) for n, t in VARIANTS.items()}
    ratios, times = [], {n: [] for n in VARIANTS}
    for _ in range(trials):
        sessions = {n: _session(t) for n, t in texts.items()}
        outs = {n: s.run(None, feeds) for n, s in sessions.items()}
        base, mha = outs["decomposition"], outs["mha_past"]
        err = float(np.abs(base[0] - mha[0]).max() / max(np.abs(base[0]).max(), 1e-30))
        equal = all(np.array_equal(a, b) for a, b in zip(base[1:], mha[1:]))
        for _ in range(5):
            for s in sessions.values():
                s.run(None, feeds)
        pass_ratios, pass_times = [], {n: [] for n in VARIANTS}
        for r in range(runs):
            order = list(sessions) if r % 2 == 0 else list(sessions)[::-1]
            took = {}
            for n in order:
                t0 = time.perf_counter()
                sessions[n].run(None, feeds)
                took[n] = time.perf_counter() - t0
            for n, t in took.items():
                pass_times[n].append(t)
            pass_ratios.append(took["decomposition"] / took["mha_past"])
        ratios.append(statistics.median(pass_ratios))
        for n in VARIANTS:
            times[n].append(statistics.median(pass_times[n]) * 1e6)
    return {"ratio": statistics.median(ratios), "passes": ratios, "rel_err": err,
            "present_equal": equal, "us": {n: statistics.median(t) for n, t in times.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-size", type=int, default=64)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--cells", default=",".join(CELLS))
    args = ap.parse_args()
    print(f"onnxruntime {ort.__version__}, {args.heads} heads of {args.head_size}, 1 thread")
    print("cell              decomposition us  mha_past us  decomposition/mha (passes)"
          "   rel err  present equal")
    for name in args.cells.split(","):
        r = run_cell(*CELLS[name], args.heads, args.head_size, args.runs, args.trials)
        passes = " ".join(f"{x:.2f}" for x in r["passes"])
        print(f"{name:17s} {r['us']['decomposition']:15.1f} {r['us']['mha_past']:12.1f}  "
              f"{r['ratio']:.3f} ({passes})  {r['rel_err']:.1e}  {r['present_equal']}", flush=True)


if __name__ == "__main__":
    main()
