"""Causal attention in query blocks: the masked half of the work is never computed.

A causal mask hides every key after the query's own position, yet the plain
decomposition multiplies all of Q·Kᵀ, runs Softmax over whole rows and multiplies
all of P·V — half of that work lands on masked entries. Splitting the queries
into ``n`` equal blocks and giving block ``i`` only the keys up to its last row
(plus the ``Skv - Sq`` offset of a cache) computes ``(1 + 2 + … + n) / n²`` of
it: 10/16 for four blocks, 36/64 for eight. Measured on one CPU thread (ONNX
Runtime 1.31, 8 heads of 64): the attention core 1.4x faster at 512 queries
with 4 blocks; from 768 queries 8 blocks beat 4 by 3% (768), 4% (1024) and 11%
(2048), hence ``TIERS`` (16 blocks would add 5% at 2048 for twice the graph);
at 128 queries the gain is within noise, hence the ``MIN_SEQUENCE`` threshold.

Exactness. A key the mask hides carries an additive value at or below -1e4
(``legality.mask`` proves that when it classifies the mask causal), so its
``exp`` underflows to exactly 0 in any row that has a visible key (unless a
hidden score exceeds the row's visible maximum by some 9,900, far beyond any
attention score), and dropping it changes nothing. A row whose every key is
hidden (left padding; a sliding window over padding) is different: its Softmax
spreads over the *whole* row — uniform with a float-minimum mask, NaN with
``-inf`` — which a block cannot reproduce. So the blocks are taken only when
every row of the mask has a visible key (one reduction over the mask, which
broadcasts over heads and is shared by all layers), ``Skv ≥ Sq`` and
``Sq ≥ MIN_SEQUENCE``; otherwise there is one block, the whole rows: the lean
decomposition of the whole node, exactly as before.

Form. The blocks are the iterations of one ``Loop`` whose body holds the one copy of
the attention, its trip count (1, 4 or 8) computed at run time: ONNX Runtime's session
creation pays for every node of every subgraph, and an ``If`` between the whole rows
and a copy per block and per tier (13 copies of the attention per layer) made a
6-layer LLaMA's output twice as slow to load as the model itself. In one Loop it loads
about as fast as the original, and runs as fast as the copies did within the noise of
paired CPU timings (0.92-1.07x at 1x512, 1.01x at 1x128; benchmarks/RESULTS.md, issue 12).
The blocks' bounds are computed once outside the Loop (:func:`_block_bounds`), so the body
holds 21 nodes, not 24.

Bands (sliding-window and local attention, ``window`` nonzero: the mask was proved to hide
every key farther than ``window`` from the query's position) skip the keys before the band
as well: block ``i`` reads keys from its first row's position minus ``window`` (and, for a
symmetric band, to its last row's plus ``window``), so its work is bounded by the window,
not by the sequence. The same exactness argument holds (the skipped keys are masked in
every row of the block), and a band narrower than the tiers' blocks takes more, smaller
blocks: a block of ``b`` rows reads ``b + window`` keys, so smaller blocks waste less, down to
where the Loop's per-block cost shows. One node at 2,048 queries (8 heads of 64, a window
of 255 keys, one CPU thread, ORT 1.31, medians of 7): the whole rows 159-181 ms, the causal
blocks reading every key before their rows (8 blocks) 102-107 ms, the band with 8 blocks
42-51 ms, 16 blocks 35-40 ms, 32 blocks (64 rows each) 30-32 ms, 64 blocks 36 ms; hence one
block per quarter window of queries, at least :data:`MIN_BAND_BLOCK_ROWS` rows each, at most
:data:`MAX_BAND_BLOCKS` blocks.

Not taken where no run can reach ``MIN_SEQUENCE`` queries: a fixed shorter length, or a
sequence bounded by a learned position table (:func:`position_table_rows`; GPT-2's ``wpe``).
There the Loop would run one block on every run and only cost the load: the GPT-2 exports of
``models/`` (128 positions) loaded 1.07-1.15x slower than their originals with it, and
0.80x and 0.29x of them without it, and ran 5-9 % faster without it (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Attr, Node
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Value
from onnxopt.legality.mask import MASKED
from onnxopt.legality.target import Target
from onnxopt.ops import AttentionAttrs
from onnxopt.ops.norms import reduce_last
from onnxopt.refusal import Refusal, refusal
from onnxopt.select._emit import i64, zero_nan
from onnxopt.select.decompose import lean_attention
from onnxopt.select.kernel import CPU, Backend, Kernel

# (fewest queries, blocks): more blocks pay once the sequence is long enough.
TIERS = ((256, 4), (768, 8))
MIN_SEQUENCE = TIERS[0][0]
# A band's blocks: one per quarter window of queries, of at least MIN_BAND_BLOCK_ROWS rows, at
# most MAX_BAND_BLOCKS of them (see the module's docstring for the measurements).
MIN_BAND_BLOCK_ROWS = 64
MAX_BAND_BLOCKS = 64
INT64_MAX = (1 << 63) - 1


def _requires(node: Node, attrs: AttentionAttrs, target: Target) -> Refusal | None:
    if not attrs.causal and not attrs.window:
        return refusal("mask_not_causal", "needs a mask proved causal or a band")
    q, k, v = node.inputs[:3]
    if any(x.rank != 4 for x in (q, k, v)):
        return refusal("not_bnsh", "needs rank-4 Q, K and V in BNSH layout")
    mask = node.input(3)
    if mask is None or mask.rank is None or mask.rank < 2:
        return refusal("no_mask_input", "needs the additive mask as an input of rank 2 or more")
    queries = q.shape[-2]
    if isinstance(queries, int) and queries < MIN_SEQUENCE:
        return refusal("too_few_queries", f"the model has {queries} queries, fewer than the "
                       f"{MIN_SEQUENCE} from which the blocks run", q.name)
    rows = position_table_rows(node.graph.root(), queries) if node.graph is not None else None
    if rows is not None and rows < MIN_SEQUENCE:
        return refusal("too_few_positions", f"{queries} is at most {rows} (its positions index "
                       f"a table of {rows} rows), fewer than the {MIN_SEQUENCE} queries from "
                       "which the blocks run", q.name)
    return None


# Ops that pass their input's values on unchanged (some of them repeated, some reshaped).
_SAME_VALUES = frozenset({"Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity", "Cast",
                          "Flatten"})


def position_table_rows(graph: Graph, dim) -> int | None:
    """The most the symbolic dim ``dim`` can be in a run of the model: the rows of a constant
    table that ``graph`` reads, with a Gather on its first axis, at the positions
    ``Range(0, dim, 1)`` (learned absolute positions: GPT-2's ``wpe``). Past those rows
    ONNX Runtime refuses the run (a Gather index out of bounds), so no sequence the original
    computes is longer. ``None`` where no such table is found (rotary positions have none).

    Only the constants with fewer rows than the blocks need are looked at, and only their
    own uses: no walk of the graph per attention block."""
    if not isinstance(dim, str):
        return None
    rows = None
    for value in graph.constants.values():
        shape = value.const.shape if value.const is not None else ()
        if not shape or not isinstance(shape[0], int) or shape[0] >= MIN_SEQUENCE:
            continue
        for user, index in value.uses():
            if (index == 0 and user.op_type == "Gather" and user.graph is graph
                    and user.attr("axis", 0) in (0, -len(shape))
                    and _counts_from_zero_to(user.inputs[1], dim)):
                rows = shape[0] if rows is None else min(rows, shape[0])
    return rows


def _counts_from_zero_to(indices: Value | None, dim: str) -> bool:
    """Whether ``indices`` hold ``0, 1, …, dim - 1`` (a ``Range(0, dim, 1)``, perhaps reshaped,
    repeated or cast on its way)."""
    for _ in range(8):
        producer = indices.producer if indices is not None else None
        if producer is None:
            return False
        if producer.op_type == "Range":
            start, limit, delta = (producer.input(i) for i in range(3))
            return (start is not None and start.sym == (0,) and delta is not None
                    and delta.sym == (1,) and limit is not None and limit.sym == (dim,))
        if producer.op_type not in _SAME_VALUES:
            return False
        indices = producer.input(0)
    return False


def _emit(b: NodeBuilder, node: Node, attrs: AttentionAttrs, target: Target) -> list[Value]:
    q, k, v = node.inputs[:3]
    mask = node.input(3)
    dtype = q.dtype or "float32"
    sq = b.op("Slice", b.op("Shape", q), i64(b, [-2], "seq_axis"), i64(b, [-1], "seq_end"))
    skv = b.op("Slice", b.op("Shape", k), i64(b, [-2], "seq_axis"), i64(b, [-1], "seq_end"))
    take_blocks = b.op("And", b.op("Not", b.op("Less", sq, i64(b, [MIN_SEQUENCE], "min_seq"))),
                       b.op("Not", b.op("Less", skv, sq)))
    take_blocks = b.op("And", take_blocks, _every_row_sees_a_key(b, mask))

    count = i64(b, [TIERS[0][1]], "blocks")
    for fewest, blocks in TIERS[1:]:
        count = b.op("Where", b.op("Less", sq, i64(b, [fewest], "tier_seq")), count,
                     i64(b, [blocks], "blocks"))
    if attrs.window:  # a narrow band: about one block per window of queries
        rows = max(attrs.window // 4, MIN_BAND_BLOCK_ROWS)
        per_window = b.op("Div", sq, i64(b, [rows], "band_block_rows"))
        count = b.op("Max", count, b.op("Min", per_window, i64(b, [MAX_BAND_BLOCKS],
                                                                  "max_band_blocks")))
    count = b.op("Where", take_blocks, count, i64(b, [1], "one_block"))  # one block: whole rows
    out = _looped(b, node, attrs, q, k, v, mask, sq, skv, count)
    if attrs.nan_to_zero:
        out = zero_nan(b, out, dtype)
    return [out]


def _looped(b: NodeBuilder, node: Node, attrs: AttentionAttrs, q, k, v, mask, sq, skv,
            count: Value) -> Value:
    """The queries in ``count`` row blocks, one per iteration of a Loop whose body holds the
    one copy of the attention: block ``i`` sees the keys up to its last row, and its rows are
    appended to the result."""
    dtype = q.dtype or "float32"
    offset = b.op("Sub", skv, sq)  # a cache's keys precede the queries (bottom-right diagonal)
    # No rows yet: [B, H, 0, Dv], the heads of Q and the features of V.
    zero = i64(b, [0], "zero")
    heads = b.op("Slice", b.op("Shape", q), zero, i64(b, [2], "two"))
    features = b.op("Slice", b.op("Shape", v), i64(b, [-1], "last"), i64(b, [INT64_MAX], "end"))
    empty = b.op("ConstantOfShape", b.op("Concat", heads, zero, features, axis=0),
                 value=LazyTensor.from_array(np.zeros(1, numpy_dtype(dtype))))
    empty.dtype = dtype

    trips = b.op("Squeeze", count, zero)
    bounds = _block_bounds(b, sq, count, trips)

    body = _subgraph(b, "block")
    step = body.graph.add_input(body.graph.names.fresh(f"{b.created_by}/block_index"),
                                "int64", ())
    go_on = body.graph.add_input(body.graph.names.fresh(f"{b.created_by}/go_on"), "bool", ())
    done = body.graph.add_input(body.graph.names.fresh(f"{b.created_by}/rows_done"), dtype,
                                _result_rows(q.shape, v.shape))
    seq_axis = i64(b, [-2], "seq_axis")  # the body reads constants from the enclosing graph
    # Row ``step`` of the bounds, and the next one: a [1] each, as Slice takes them.
    start = body.op("Gather", bounds, step, axis=0)
    end = body.op("Gather", bounds, body.op("Add", step, b.const(np.array(1, np.int64),
                                                                    "block_step")), axis=0)
    key_start, key_end = _block_keys(b, body, attrs, start, end, offset, zero)
    q_block = body.op("Slice", q, start, end, seq_axis)
    k_block = body.op("Slice", k, key_start, key_end, seq_axis)
    v_block = body.op("Slice", v, key_start, key_end, seq_axis)
    for block, whole in ((q_block, q), (k_block, k), (v_block, v)):
        block.dtype, block.shape = whole.dtype, _rows_unknown(whole.shape)
    m_block = body.op("Slice", mask, body.op("Concat", start, key_start, axis=0),
                      body.op("Concat", end, key_end, axis=0), i64(b, [-2, -1], "mask_axes"))
    rows = lean_attention(body, node, attrs, q_block, k_block, v_block, m_block)
    body.graph.set_outputs([body.op("Identity", go_on),
                            body.op("Concat", done, rows, axis=-2)])

    result = b.op("Loop", trips, b.const(np.array(True), "keep_going"), empty,
                  body=Attr(AttributeProto.GRAPH, body.graph))
    body.graph.parent = result.producer
    result.dtype = dtype
    return result


def _block_keys(b: NodeBuilder, body: NodeBuilder, attrs: AttentionAttrs, start: Value,
                end: Value, offset: Value, zero: Value) -> tuple[Value, Value]:
    """The keys block ``[start, end)`` of the queries reads: up to its last row's position
    (``+ offset``, a cache's keys first), or ``window`` past it for a symmetric band (Slice
    clamps an end past the keys); from key 0, or, in a band, from ``window`` before its first
    row's position (clamped at 0: a negative start would count from the end)."""
    key_end = body.op("Add", end, offset)
    if not attrs.window:
        return zero, key_end
    window = i64(b, [attrs.window], "window")
    if not attrs.causal:
        key_end = body.op("Add", key_end, window)
    key_start = body.op("Max", body.op("Sub", body.op("Add", start, offset), window), zero)
    return key_start, key_end


def _block_bounds(b: NodeBuilder, sq: Value, count: Value, trips: Value) -> Value:
    """Where each block's query rows start, as a column of ``[blocks + 1, 1]``: block ``i``
    is rows ``bounds[i]`` to ``bounds[i + 1]``, ``sq·i/count`` to ``sq·(i+1)/count`` (the
    last ends at ``sq`` exactly). Computed outside the Loop, the body reads its two rows
    with a Gather each instead of computing them (3 of its nodes fewer, and ONNX Runtime's
    session creation pays for every node of every Loop body); it depends only on the
    lengths and the block count, so the layers' copies are merged into one by cleanup."""
    one = b.const(np.array(1, np.int64), "block_step")
    blocks = b.op("Range", b.const(np.array(0, np.int64), "first_block"),
                  b.op("Add", trips, one), one)  # 0 .. count
    return b.op("Unsqueeze", b.op("Div", b.op("Mul", blocks, sq), count),
                i64(b, [1], "column"))


def _every_row_sees_a_key(b: NodeBuilder, mask: Value) -> Value:
    """True when every row of the additive mask has an entry above the masking range."""
    lowest_row_max = b.op("ReduceMin", reduce_last(b, "ReduceMax", mask), keepdims=0)
    return b.op("Greater", lowest_row_max,
                b.const(np.array(MASKED, numpy_dtype(mask.dtype or "float32")), "masked"))


def _subgraph(b: NodeBuilder, name: str) -> NodeBuilder:
    graph = Graph(b.graph.names.fresh(f"{b.created_by}/{name}"), names=b.graph.names)
    return NodeBuilder(graph, None, b.created_by, opset=b.opset)


def _result_rows(q_shape, v_shape):
    """The shape of some rows of the result: Q's batch and heads, V's features."""
    if q_shape is None or v_shape is None:
        return None
    return (*q_shape[:2], None, v_shape[-1])


def _rows_unknown(shape):
    """``shape`` with its sequence axis (-2) unknown: the shape of a block of its rows."""
    return None if shape is None else (*shape[:-2], None, shape[-1])


def causal_block_kernels() -> list[Kernel]:
    return [Kernel(
        name="decompose.AttentionFused.causal_blocks", implements="AttentionFused",
        backend=Backend.DECOMPOSE, emit=_emit, providers=CPU, min_opset=13, requires=_requires,
        cost=0.9, switch_seq=MIN_SEQUENCE,
        notes="causal or banded attention in query blocks, masked keys skipped (a Loop over one copy: "
              f"at least {MIN_SEQUENCE} queries and a visible key in every mask row; "
              + ", ".join(f"{n} blocks from {s}" for s, n in TIERS)
              + "; else one block, the lean decomposition)")]
