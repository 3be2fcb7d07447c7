"""What an ``If`` around a decode step's attention costs when its branches read the cache.

``decode_speed.py --stage if-cost`` times an ``If`` around a Softmax over a graph input:
0.8 us. A query-length switch around attention is different: its branches read the key/value
cache that the outer graph made (``Concat(past, new)``, also a graph output, as in every
decoder-with-past export). This builds ``--blocks`` decode attentions (one query, 8 heads of
64, ``Transpose``/``MatMul``/scale/mask/``Softmax``/``MatMul``), each over its own cache
``Concat(past, k)`` / ``Concat(past, v)`` that is an output, bare and with each attention in an
``If`` on the query count (both branches the same attention), and times them interleaved
(ORT CPU, 1 thread, no spinning) with ONNX Runtime's memory pattern on (its default) and off.

    python benchmarks/if_cache_cost.py [--past 127,1023] [--rounds 300] [--passes 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

HEADS, HEAD_SIZE = 8, 64


def _attention(q: str, k: str, v: str, out: str, tag: str) -> list:
    return [helper.make_node("Transpose", [k], [f"{tag}kt"], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", [q, f"{tag}kt"], [f"{tag}s"]),
            helper.make_node("Mul", [f"{tag}s", "scale"], [f"{tag}ss"]),
            helper.make_node("Add", [f"{tag}ss", "mask"], [f"{tag}sm"]),
            helper.make_node("Softmax", [f"{tag}sm"], [f"{tag}p"], axis=-1),
            helper.make_node("MatMul", [f"{tag}p", v], [out])]


def model(switched: bool, blocks: int) -> bytes:
    nodes = [helper.make_node("Shape", ["q0"], ["shape"]),
             helper.make_node("Gather", ["shape", "axis"], ["queries"], axis=0),
             helper.make_node("Less", ["queries", "two"], ["few"])]
    outputs = []
    for b in range(blocks):
        q, k, v, out = f"q{b}", f"present_key{b}", f"present_value{b}", f"q{b + 1}"
        nodes += [helper.make_node("Concat", ["past_key", q], [k], axis=2),
                  helper.make_node("Concat", ["past_value", q], [v], axis=2)]
        outputs += [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in (k, v)]
        if not switched:
            nodes += _attention(q, k, v, out, f"b{b}/")
            continue
        branches = {f"{side}_branch": helper.make_graph(
            _attention(q, k, v, f"{side}{b}", f"{side}{b}/"), f"{side}{b}", [],
            [helper.make_tensor_value_info(f"{side}{b}", TensorProto.FLOAT, None)])
            for side in ("then", "else")}
        nodes.append(helper.make_node("If", ["few"], [out], **branches))
    dims = ["batch", HEADS]
    graph = helper.make_graph(
        nodes, "decode_attention",
        [helper.make_tensor_value_info("q0", TensorProto.FLOAT, [*dims, "seq", HEAD_SIZE]),
         helper.make_tensor_value_info("past_key", TensorProto.FLOAT, [*dims, "past", HEAD_SIZE]),
         helper.make_tensor_value_info("past_value", TensorProto.FLOAT,
                                       [*dims, "past", HEAD_SIZE]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", 1, "seq", "total"])],
        [helper.make_tensor_value_info(f"q{blocks}", TensorProto.FLOAT, None), *outputs],
        [helper.make_tensor("axis", TensorProto.INT64, [1], [2]),
         helper.make_tensor("two", TensorProto.INT64, [1], [2]),
         helper.make_tensor("scale", TensorProto.FLOAT, [], [HEAD_SIZE ** -0.5])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 9
    return proto.SerializeToString()


def session(data: bytes, mem_pattern: bool) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.enable_mem_pattern = mem_pattern
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--past", default="127,1023")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    for past in (int(p) for p in args.past.split(",")):
        feeds = {"q0": rng.standard_normal((1, HEADS, 1, HEAD_SIZE), dtype=np.float32),
                 "past_key": rng.standard_normal((1, HEADS, past, HEAD_SIZE), dtype=np.float32),
                 "past_value": rng.standard_normal((1, HEADS, past, HEAD_SIZE), dtype=np.float32),
                 "mask": np.zeros((1, 1, 1, past + 1), np.float32)}
        for pattern in (True, False):
            per_if = []
            for _ in range(args.passes):
                sessions = [session(model(s, args.blocks), pattern) for s in (False, True)]
                for s in sessions:
                    for _ in range(10):
                        s.run(None, feeds)
                times: list[list[float]] = [[], []]
                for r in range(args.rounds):
                    for k in (r % 2, 1 - r % 2):
                        start = time.perf_counter()
                        sessions[k].run(None, feeds)
                        times[k].append(time.perf_counter() - start)
                bare, switched = (statistics.median(t) * 1e6 for t in times)
                per_if.append((bare, switched, (switched - bare) / args.blocks))
            bare, switched, cost = (statistics.median(x[i] for x in per_if) for i in range(3))
            print(f"past {past}, memory pattern {'on ' if pattern else 'off'}: bare {bare:.1f} us, "
                  f"each attention in an If {switched:.1f} us: {cost:.1f} us per If "
                  f"(passes: {' '.join(f'{x[2]:.1f}' for x in per_if)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
