"""A run of one decode step, where the optimized model chooses kernels by query length.

Selection may bind an attention node twice, one kernel for a decode step (up to a few
queries against a key/value cache) and one for a prefill, behind an ``If`` on the query
length (``select/regime_switch.py``). The usual runs (lengths 7, 16, 29) take only the
prefill branch: without a run at the decode step's query length its kernel is never
compared. The ``If`` says its threshold (``onnxopt.switch_queries``) and the query length in
the inputs' symbols (``onnxopt.switch_query_dim``: ``seq``, ``(total-past)``), so one more run
sizes the length symbols to make that query length 1, with the other lengths (a cache's past,
the mask's total) at :data:`DECODE_PAST` or one more, at batch 2 so that the masks are padded
on the right in one row and on the left in the other.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from onnx import ModelProto

from onnxopt import evaluation
from onnxopt.ir import symdim as sd

SWITCH_QUERIES = "onnxopt.switch_queries"
SWITCH_QUERY_DIM = "onnxopt.switch_query_dim"
DECODE_PAST = 29  # cached positions: not a multiple of a tile size
DECODE_BATCH = 2  # one row padded on the right, one on the left
MAX_ATTEMPTS = 12


@dataclass(frozen=True)
class DecodeStep:
    """The switch of the optimized model: runs with up to ``queries`` queries take its
    decode kernel; ``query_dim`` is the query length in the inputs' symbols (None: not known,
    e.g. a file written before the key existed)."""

    queries: int
    query_dim: str | None


def decode_step(proto: ModelProto) -> DecodeStep | None:
    """The optimized model's query-length switch (the first ``If`` that records one), or
    None where it has none."""
    for node in evaluation.all_node_protos(proto.graph):
        meta = {p.key: p.value for p in node.metadata_props}
        if SWITCH_QUERIES in meta:
            try:
                queries = int(meta[SWITCH_QUERIES])
            except ValueError:
                continue
            return DecodeStep(queries, meta.get(SWITCH_QUERY_DIM) or None)
    return None


def decode_sizes(step: DecodeStep, symbols: list[str], fixed: dict[str, int]
                 ) -> tuple[list[dict[str, int]], str | None]:
    """Assignments of the length ``symbols`` (those in ``fixed`` keep their size) under which
    the query length is 1, most of the other lengths long first (a past, then the past plus
    the new token), at most :data:`MAX_ATTEMPTS`; or ([], why there are none)."""
    if step.query_dim is None:
        return [], "the switch does not say which input dim is its query length"
    free = [s for s in symbols if s not in fixed]
    choices = (DECODE_PAST, DECODE_PAST + 1, 1)
    found = []
    for combo in itertools.product(range(len(choices)), repeat=len(free)):
        sizes = {**fixed, **{s: choices[i] for s, i in zip(free, combo)}}
        if sd.evaluate(step.query_dim, sizes, default=-1) == 1:
            found.append((sum(i == 2 for i in combo), sum(combo), sizes))
    if not found:
        return [], (f"no sizes of the inputs' lengths ({', '.join(symbols) or 'none'}"
                    f"{'; --shape fixes ' + ', '.join(sorted(fixed)) if fixed else ''}) make "
                    f"its query length {step.query_dim} 1")
    found.sort(key=lambda f: f[:2])
    return [sizes for _, _, sizes in found[:MAX_ATTEMPTS]], None
