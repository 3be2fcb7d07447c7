"""AttentionFused over a key/value cache on ONNX Runtime's ``MultiHeadAttention`` with
``past_key``/``past_value`` and ``present_key``/``present_value``.

    AttentionFused(Q, Concat(past_k, k, axis=2), Concat(past_v, v, axis=2), mask)
        -> com.microsoft.MultiHeadAttention(Q packed, k packed, v packed, attention_bias=mask,
                                            past_key=past_k, past_value=past_v)
           whose present_key / present_value replace the Concats (the model's ``present``
           outputs where the Concats are graph outputs)

What ORT 1.31 (CPU) computes was probed against the float64 reference
(``benchmarks/ort_past_probe.py``; benchmarks/RESULTS.md, "ORT attention kernels with a
key/value cache"):

- with ``attention_bias`` (``[B|1, 1, S, P+S]``) and ``unidirectional=0`` it is
  ``softmax(Q·Kᵀ·scale + bias)·V`` over ``K = Concat(past_key, key)`` exactly as the
  decomposition (max error 2e-7 on O(1) outputs) at every past length tried (0-16), one and
  several query rows, batch 1-3, left, right and no padding; a row whose every key is masked
  with the float minimum averages V as the decomposition does; ``present_key`` /
  ``present_value`` are byte-equal to ``Concat(past, new)`` (a copy). This binding uses that
  form: the mask the kernel applies is the fused node's own exact mask, so no mask structure
  needs proving, and left and right padding are the same case.
- with a 2-D ``key_padding_mask`` the kernel adds ``mask_filter_value`` (-10,000 by default)
  to padded keys: exact for one query row (unidirectional or not) while some key is visible,
  but a row with every key padded gives softmax of the raw scores, not the model's average,
  and with ``unidirectional=1`` the first rows of a left-padded prompt differ the same way;
  without ``unidirectional`` several query rows see every key. Not bound: the exact bias
  costs one Expand of a ``[B, 1, 1, P+S]`` mask and keeps every case.
- ``GroupQueryAttention`` writes each row's new keys right after its ``seqlens_k`` valid keys
  (not after the whole past, where the model's Concat puts them) and attends to the first
  ``seqlens_k + 1`` keys: with padding in any row its output and present differ from the
  model's (errors 1.4-1.8 on O(1) outputs, left and right padding both); with no padding at
  all it is exact (and refuses batch > 1 with several new tokens). The mask carries key
  padding from the attention mask, so it is refused (``ort_attention.py``).

Legal where K and V are each the output of a two-input Concat on the sequence axis of BNSH
values, read only by this node and, at most, as graph outputs (the kernel's present output
replaces them: it is the same bytes), with as many key/value heads as query heads (a
grouped-query cache would need its heads repeated, and the present output would then hold
the repeats, not the model's cache).
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.edit import replace_value
from onnxopt.ir.node import STANDARD_DOMAINS, Node
from onnxopt.ir.value import Value
from onnxopt.legality.target import Target
from onnxopt.ops import AttentionAttrs
from onnxopt.refusal import Refusal, refusal
from onnxopt.select._checks import bnsh_inputs, no_softcap
from onnxopt.select._emit import i64, zero_nan
from onnxopt.select.kernel import BOTH_PROVIDERS, MS_DOMAIN, Backend, Kernel, Layout
from onnxopt.select.layout import packed_heads
from onnxopt.select.ort_attention import FLOAT_HALF

NAME = "ort.MultiHeadAttention.past"


def cache_concat(node: Node, which: int) -> tuple[Node, Value, Value] | Refusal:
    """(the Concat, the past, the new value) that the node's K (``which`` 1) or V (2) is, or
    why it is not a cache the kernel can take over."""
    x = node.inputs[which]
    label = "K" if which == 1 else "V"
    concat = x.producer
    if concat is None or concat.op_type != "Concat" or concat.domain not in STANDARD_DOMAINS:
        return refusal("no_cache_concat", f"%{x.name}: {label} is not a Concat(past, new) of "
                       "a key/value cache", x.name)
    if len(concat.inputs) != 2 or any(v is None for v in concat.inputs):
        return refusal("no_cache_concat", f"%{x.name}: {label} concatenates "
                       f"{len(concat.inputs)} values, not a past and a new one", x.name)
    past, new = concat.inputs
    axis = concat.attr("axis", concat.sem.get("axis"))
    if x.rank != 4 or past.rank != 4 or new.rank != 4 or axis not in (2, -2):
        return refusal("cache_axis", f"%{x.name}: {label} is concatenated on axis {axis} of "
                       f"rank-{x.rank} values, not the sequence axis of [B, H, S, D]", x.name)
    if concat.graph is not node.graph:
        return refusal("cache_outside_graph", f"%{x.name}: the cache Concat is in another "
                       "graph than the attention", x.name)
    if any(user is not node for user, _ in x.uses()):
        return refusal("cache_read_elsewhere", f"%{x.name}: the concatenated cache is read by "
                       "other nodes than the attention; the kernel's present output could "
                       "replace only a graph output", x.name)
    if past.dtype != new.dtype or past.dtype != node.inputs[0].dtype:
        return refusal("cache_dtype", f"%{past.name}: the cache is {past.dtype}, the new "
                       f"values {new.dtype}, the queries {node.inputs[0].dtype}", past.name)
    return concat, past, new


def _requires(node: Node, attrs: AttentionAttrs, target: Target) -> Refusal | None:
    if reason := no_softcap(attrs):
        return reason
    if reason := bnsh_inputs(node):
        return reason
    q, k, v = node.inputs[:3]
    if k.shape[1] != q.shape[1] or v.shape[1] != q.shape[1]:
        return refusal("grouped_query_cache", f"past_key has as many heads as the queries "
                       f"({q.shape[1]}); the cache has {k.shape[1]}: repeating its heads "
                       "would change the present output", k.name)
    if k.shape[3] != q.shape[3] or v.shape[3] != q.shape[3]:
        return refusal("value_head_size", f"%{v.name}: one head size for Q, K and V, got "
                       f"{q.shape[3]}, {k.shape[3]}, {v.shape[3]}", v.name)
    for which in (1, 2):
        if isinstance(found := cache_concat(node, which), Refusal):
            return found
    if k.producer is v.producer:
        return refusal("no_cache_concat", "K and V are one Concat's output")
    mask = node.input(3)
    if mask is not None and mask.dtype != q.dtype:
        return refusal("mask_dtype", f"%{mask.name}: the additive mask is {mask.dtype}, the "
                       f"queries {q.dtype}", mask.name)
    if mask is not None and (mask.shape is None or len(mask.shape) != 4):
        return refusal("mask_shape", f"%{mask.name}: attention_bias needs the mask as "
                       "[B|1, H|1, S|1, P+S]; its shape is unknown or not of rank 4", mask.name)
    if mask is not None and not (sd.same(mask.shape[1], 1) or sd.same(mask.shape[1],
                                                                       q.shape[1])):
        return refusal("mask_shape", f"%{mask.name}: the mask's head axis is "
                       f"{mask.shape[1]}", mask.name)
    return None


def _emit(b, node: Node, attrs: AttentionAttrs, target: Target) -> list:
    q = node.inputs[0]
    heads, head_size = q.shape[1], q.shape[3]
    caches = [cache_concat(node, which) for which in (1, 2)]
    for found in caches:  # only a graph holding the cache (not --tune's micro-model of the node)
        if isinstance(found, Refusal):
            raise ValueError(found.text)  # noqa: TRY004 - a graph it cannot take
    (k_concat, past_k, new_k), (v_concat, past_v, new_v) = caches
    out, present_k, present_v = b.op(
        "MultiHeadAttention", packed_heads(b, q, heads, head_size),
        packed_heads(b, new_k, heads, head_size), packed_heads(b, new_v, heads, head_size),
        None, None, _bias(b, node, past_k, new_k), past_k, past_v, outputs=3, domain=MS_DOMAIN,
        num_heads=heads, scale=attrs.scale)
    graph = b.graph
    for concat, present in ((k_concat, present_k), (v_concat, present_v)):
        cache = concat.outputs[0]
        present.dtype, present.shape = cache.dtype, cache.shape
        if cache.is_graph_output and not replace_value(graph, cache, present):
            alias = b.op("Identity", present)  # pragma: no cover - present is this graph's
            alias.dtype, alias.shape = cache.dtype, cache.shape
            replace_value(graph, cache, alias)
    if attrs.nan_to_zero:
        out = zero_nan(b, out, q.dtype)
    return [out]  # packed [B, S, H*D]; bind removes the Concats once the node is gone


def _bias(b, node: Node, past_k: Value, new_k: Value):
    """The exact mask as ``attention_bias`` ``[B|1, H|1, S, P+S]``, its key length read from the
    past and new keys, never from the cache Concat (which the kernel's present replaces)."""
    mask, q, k = node.input(3), node.inputs[0], node.inputs[1]
    if mask is None:
        return None
    if sd.same(mask.shape[2], q.shape[2]) and sd.same(mask.shape[3], k.shape[2]):
        return mask

    def length(x):
        return b.op("Slice", b.op("Shape", x), i64(b, [2], "start"), i64(b, [3], "end"))

    keys = b.op("Add", length(past_k), length(new_k))
    return b.op("Expand", mask, b.op("Concat", i64(b, [1, 1], "ones"), length(q), keys, axis=0))


def kernels() -> list[Kernel]:
    return [Kernel(name=NAME, implements="AttentionFused", backend=Backend.ORT, emit=_emit,
                   dtypes=FLOAT_HALF, providers=BOTH_PROVIDERS, opsets={MS_DOMAIN: 1},
                   min_ort=(1, 17), requires=_requires, cost=1.0, layout=Layout.BSH,
                   notes="a key/value cache Concat(past, new) taken over: past_key/value in, "
                         "present_key/value out (replacing the model's present outputs), "
                         "exact mask as attention_bias")]

