"""Per-op cost of libonnxopt_ops over ONNX Runtime's native Identity, and whether two sessions
running at once in two threads serialize.

Overhead: a chain of N one-element float32 nodes, ``ai.onnxopt.cuda::BiasGelu`` against
``Identity`` (graph optimizations off, so ORT keeps every Identity; one intra-op thread), and
one node of each. The per-op overhead is the median difference of the chains (run alternately) divided by N:
what a node of ours costs beyond a native node (reading the tensors and attributes through the
C API, the plan, the launch), with the session's fixed per-run cost cancelled out.

Concurrency: two sessions (one intra-op thread each) of a float32 attention node large enough
to take milliseconds; the wall time of R runs of one session alone against that of two
threads running R runs each at the same time. Near 1.0: they do not serialize (the library
takes no global lock on the call path; the Python bridge this replaced held the GIL). That
ratio needs two idle cores to mean anything; the share of the time during which both threads
were inside ``run()`` at once does not (a lock on the call path would make it 0).

    python benchmarks/bridge_overhead.py [--chain 200] [--runs 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import numpy as np
import onnx.parser
import onnxruntime as ort

from onnxopt.runtime import library

DOMAIN = "ai.onnxopt.cuda"


def _model(body: list[str], x: str, y: str) -> bytes:
    text = (f'<ir_version: 10, opset_import: ["": 21, "{DOMAIN}": 1]>\n'
            f"g ({x}) => ({y}) {{\n" + "\n".join(body) + "\n}")
    proto = onnx.parser.parse_model(text)
    proto.ir_version = 10
    return proto.SerializeToString()


def chain(op: str, n: int) -> bytes:
    body = [f"t{i + 1} = {op} (t{i})" for i in range(n)]
    body[0] = body[0].replace("(t0)", "(x)")
    body[-1] = body[-1].replace(f"t{n} =", "y =")
    return _model(body, "float[1] x", "float[1] y")


def _session(model: bytes, *, ours: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    if ours:
        options.register_custom_ops_library(library.path())
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def median_us(sess: ort.InferenceSession, feed: dict, runs: int) -> float:
    for _ in range(max(runs // 10, 20)):
        sess.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        sess.run(None, feed)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


def overhead(n: int, runs: int) -> dict:
    feed = {"x": np.ones(1, np.float32)}
    rows = {}
    for label, op, ours in (("identity", "Identity", False),
                            ("ours", f"{DOMAIN}.BiasGelu", True)):
        rows[f"{label}_1"] = median_us(_session(chain(op, 1), ours=ours), feed, runs)
    # The chains run alternately, a run of each per round, and the per-op cost is the median
    # of the rounds' differences: a stretch of load from other processes slows both alike.
    native = _session(chain("Identity", n), ours=False)
    ours = _session(chain(f"{DOMAIN}.BiasGelu", n), ours=True)
    for sess in (native, ours):
        median_us(sess, feed, 20)
    pairs = []
    for _ in range(runs // 4):
        times = []
        for sess in (native, ours):
            start = time.perf_counter_ns()
            sess.run(None, feed)
            times.append((time.perf_counter_ns() - start) / 1000)
        pairs.append(times)
    rows[f"identity_{n}"] = statistics.median(p[0] for p in pairs)
    rows[f"ours_{n}"] = statistics.median(p[1] for p in pairs)
    rows["per_op_us"] = statistics.median(p[1] - p[0] for p in pairs) / n
    return rows


ATTENTION_IO = "float[1,4,96,64] q, float[1,4,96,64] k, float[1,4,96,64] v"


def concurrency(runs: int) -> dict:
    """Two sessions of ours in two threads, and, as the control, two sessions of the same
    attention written in plain ONNX ops (ORT's own kernels): on a machine whose cores are
    busy with other work both ratios rise alike; only ours rising would be serialization."""
    ours = _model(["o = ai.onnxopt.cuda.FlashAttention <causal=0> (q, k, v)"],
                  ATTENTION_IO, "float[1,4,96,64] o")
    native = _model(["kt = Transpose <perm=[0,1,3,2]> (k)", "s = MatMul (q, kt)",
                     "p = Softmax <axis=-1> (s)", "o = MatMul (p, v)"],
                    ATTENTION_IO, "float[1,4,96,64] o")
    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal((1, 4, 96, 64)).astype(np.float32) for n in "qkv"}
    return {"ours": _two_threads([_session(ours, ours=True) for _ in range(2)], feed, runs),
            "native": _two_threads([_session(native, ours=False) for _ in range(2)], feed,
                                   runs * 4)}


def _two_threads(sessions: list, feed: dict, runs: int) -> dict:
    for sess in sessions:
        sess.run(None, feed)

    def work(sess, spans):
        for _ in range(runs):
            start = time.perf_counter()
            sess.run(None, feed)
            spans.append((start, time.perf_counter()))

    start = time.perf_counter()
    work(sessions[0], [])
    alone = time.perf_counter() - start
    spans: list[list] = [[], []]
    threads = [threading.Thread(target=work, args=(s, p)) for s, p in zip(sessions, spans)]
    start, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    together, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"alone_s": alone, "two_threads_s": together, "ratio": together / alone,
            "ms_per_run": alone / runs * 1000, "overlap": _overlap(*spans) / together,
            "cores_used": cpu / together}


def _overlap(a: list, b: list) -> float:
    """Seconds during which a run of each thread was in progress at once (a lock around the
    call path would make it 0, however many cores there are)."""
    total, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            total += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", type=int, default=200)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--concurrent-runs", type=int, default=40)
    args = parser.parse_args()
    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} CPUs, library {library.path()}")
    o = overhead(args.chain, args.runs)
    print(f"one node, median run:      Identity {o['identity_1']:7.2f} us   "
          f"BiasGelu (ours) {o['ours_1']:7.2f} us")
    print(f"{args.chain} nodes, median run:  Identity {o[f'identity_{args.chain}']:7.1f} us   "
          f"BiasGelu (ours) {o[f'ours_{args.chain}']:7.1f} us")
    print(f"per-op overhead of libonnxopt_ops over Identity: {o['per_op_us']:.2f} us")
    c = concurrency(args.concurrent_runs)
    for label, r in (("libonnxopt_ops FlashAttention", c["ours"]),
                     ("ORT's MatMul/Softmax (control)", c["native"])):
        print(f"{label:<32} [1,4,96,64] float32: {r['ms_per_run']:.2f} ms/run alone; two "
              f"sessions in two threads take {r['ratio']:.2f}x one alone (1.0: parallel, "
              f"2.0: serialized), {r['cores_used']:.2f} cores busy, both inside run() "
              f"{r['overlap']:.0%} of the time")


if __name__ == "__main__":
    main()
