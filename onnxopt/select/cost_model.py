"""The cost model: each kernel's time relative to the decomposition, seeded from measurements.

Without ``--tune`` the selector ranks legal kernels by these numbers. Each entry
is keyed by kernel, execution provider and, most specific first, the node's
*features* — what changes the answer: whether a norm folds a residual and
also outputs the sum, whether attention carries a NaN guard or grouped heads,
whether it is a decode step (a few queries against a longer cache), and a size bucket of
the work at the regime's sizes (:mod:`onnxopt.select.workload`; batch 1, sequence 128 for
a prefill).
A kernel with no entry ranks by its ``Kernel.cost`` prior.

The CPU numbers are medians of ``--tune`` micro-models (ONNX Runtime 1.31, 1
thread, AMD EPYC) over the fused nodes of the mid-size GPT-2/BERT/LLaMA exports of
``benchmarks/cpu_speed.py`` at batch 1 x seq 128, batch 1 x seq 512 and batch 8 x
seq 128 (``python benchmarks/seed_cost_model.py MODEL...`` prints them), and of
synthetic opset-20/23/24 models for the kernels those exports cannot use.
"""

from __future__ import annotations

from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.ops import AttentionAttrs, NormAttrs, attributes_of
from onnxopt.select.kernel import Backend, Kernel
from onnxopt.select.shapes import Binding

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"

# (kernel, provider, *features) -> time relative to the decomposition of the same node.
SEED: dict[tuple[str, ...], float] = {
    # Attention. On CPU ORT's MultiHeadAttention is 1.0-1.25x the decomposed graph (which ORT
    # runs as batched MatMuls); ONNX Attention-23 about 0.97x. SDPA exports' NaN guard costs
    # two passes over the [B,H,S,L] probabilities; the fused ops and the output-guard
    # decomposition zero NaN on [B,H,S,D] instead.
    ("ort.MultiHeadAttention", CPU, "S"): 1.12,
    ("ort.MultiHeadAttention", CPU): 1.06,
    ("ort.MultiHeadAttention.repeat_kv", CPU, "nan_guard", "S"): 1.12,
    ("ort.MultiHeadAttention.repeat_kv", CPU, "nan_guard"): 0.92,
    ("ort.MultiHeadAttention.repeat_kv", CPU): 1.1,
    ("onnx.Attention-23", CPU, "nan_guard"): 0.85,
    ("onnx.Attention-23", CPU): 0.97,
    ("decompose.AttentionFused.lean", CPU, "nan_guard", "S"): 0.88,
    ("decompose.AttentionFused.lean", CPU, "nan_guard"): 0.75,
    ("decompose.AttentionFused.lean", CPU, "grouped"): 0.96,
    # Causal blocks branch on the sequence length at run time (the lean decomposition below
    # MIN_SEQUENCE queries, 0.47-0.69x the decomposition at 512), so their entries are not
    # keyed by the size bucket of batch 1 x seq 128: they are geometric means over 1x128,
    # 1x512 and 8x128 (the GPT-2 and LLaMA exports of benchmarks/cpu_speed.py; short sequences
    # pay the Loop of one block, 2-3% of the attention alone).
    # Where the workload states a prompt of at least MIN_SEQUENCE queries (the "long" feature),
    # the blocks run at that length: 0.71x the decomposition at 1x512 (1.40x faster, the
    # attention core alone, benchmarks/causal_blocks.py; RESULTS.md), 0.47-0.69x with a NaN
    # guard (its two passes over the probabilities shrink with the blocks).
    ("decompose.AttentionFused.causal_blocks", CPU, "nan_guard", "grouped", "long"): 0.58,
    ("decompose.AttentionFused.causal_blocks", CPU, "nan_guard", "long"): 0.58,
    ("decompose.AttentionFused.causal_blocks", CPU, "long"): 0.71,
    ("decompose.AttentionFused.causal_blocks", CPU, "nan_guard", "grouped"): 0.71,
    ("decompose.AttentionFused.causal_blocks", CPU, "nan_guard"): 0.71,
    ("decompose.AttentionFused.causal_blocks", CPU): 0.87,
    # Decode steps (a few queries against a longer cache: the "decode" feature). Attention
    # micro-models of the hidden-512 decoder_with_past exports of benchmarks/decode_speed.py
    # (GPT-2 TorchScript, LLaMA dynamo) at batch 1 past 127/1023/4095 and batch 4 past 511:
    # causal blocks 1.25-2.15x (GPT-2) and 0.92-1.61x (LLaMA) the decomposition: the Loop of one
    # block copies the whole cache and nothing is masked; ORT's MultiHeadAttention 0.91-1.06x,
    # with its key/value heads repeated 1.43-1.91x; the lean form 0.88-0.96x.
    ("decompose.AttentionFused.causal_blocks", CPU, "decode"): 1.5,
    ("ort.MultiHeadAttention", CPU, "decode"): 1.02,
    ("ort.MultiHeadAttention.repeat_kv", CPU, "decode"): 1.6,
    ("decompose.AttentionFused.lean", CPU, "decode"): 0.92,
    # ORT's MultiHeadAttention taking over the cache Concat (past in, present out): the
    # attention block alone, 8 heads of 64 at batch 1 past 127/1023/4095 and batch 4 past 511,
    # 0.97-0.98x the decomposition (0.85x at past 4095), 1.00x at a 128-token prefill
    # (benchmarks/past_attention_speed.py; RESULTS.md).
    ("ort.MultiHeadAttention.past", CPU, "decode"): 0.97,
    ("ort.MultiHeadAttention.past", CPU): 1.0,
    # Rotary: ORT's RotaryEmbedding on the model's own cos/sin rows (their halves proved
    # equal) is 0.62-0.77x the decomposition at batch 1 x 128 tokens x 8 heads of 64 and
    # 0.93-1.04x (within a microsecond) in decode steps (LLaMA dynamo export of
    # benchmarks/decode_speed.py, q and k); on small tensors (4 heads of 16 x 128 tokens, the
    # models/ LLaMA) the rows it is given cost more than it saves: 0.94-1.08x.
    ("ort.RotaryEmbedding", CPU, "small"): 1.05,
    ("ort.RotaryEmbedding", CPU): 0.75,
    # LayerNorm: the decomposition's Add + LayerNormalization becomes ORT's CPU
    # SkipLayerNormalization (7x slower) when the sum has no other reader; with the sum also
    # an output, ORT leaves the two ops alone and an explicit SkipLayerNormalization is the
    # slow one.
    ("onnx.LayerNormalization-17", CPU, "residual", "sum_out"): 1.0,
    ("onnx.LayerNormalization-17", CPU, "residual"): 0.14,
    ("onnx.LayerNormalization-17", CPU): 1.0,
    ("ort.SkipLayerNormalization", CPU, "residual", "sum_out"): 7.5,
    ("ort.SkipLayerNormalization", CPU, "residual"): 1.0,
    # RMSNorm: ORT does not fuse the decomposition (the Reciprocal spelling); spelled with a
    # Div it does (SimplifiedLayerNormalization, one pass). The Skip form is no faster than
    # the decomposition.
    ("decompose.RMSNormFused.ort_fusable", CPU, "residual"): 0.6,
    ("decompose.RMSNormFused.ort_fusable", CPU): 0.47,
    ("onnx.RMSNormalization-23", CPU, "residual"): 0.61,
    ("onnx.RMSNormalization-23", CPU): 0.48,
    ("ort.SkipSimplifiedLayerNormalization", CPU, "residual"): 1.1,
    # GELU: the decomposition's spelling (x·(1/√2)) is not the one ORT's own GELU fusion
    # matches, so the explicit ops are 0.35-0.75x.
    ("ort.FastGelu", CPU): 0.38,
    ("ort.Gelu", CPU): 0.55,
    ("ort.BiasGelu", CPU): 0.69,
    ("onnx.Gelu-20", CPU): 0.56,
    # SiLU/SwiGLU: ORT fuses x·sigmoid(x) into QuickGelu itself; ONNX Swish-24 is 3x slower.
    ("ort.QuickGelu", CPU): 1.02,
    ("ort.QuickGelu.mul", CPU): 1.05,
    ("onnx.Swish-24", CPU): 3.2,
    # CUDA (not measured here: priors): fused ops save launches and memory passes.
    ("ort.SkipLayerNormalization", CUDA, "residual"): 0.6,
    ("ort.SkipSimplifiedLayerNormalization", CUDA, "residual"): 0.5,
    ("ort.MultiHeadAttention", CUDA): 0.6,
}


# What switching kernels by query length costs the few-query regime (a decode step), relative
# to the kernel it switches to there: the ``If``'s branches read the key/value cache from the
# outer graph, and ONNX Runtime 1.31 (CPU) runs the attention's MatMuls over it slower there than
# the same nodes outside an If (profiled at past 1023: 1.3x and 1.6x). Measured on the hidden-512
# GPT-2 decoder_with_past exports of benchmarks/decode_speed.py (dynamo, 8 heads of 64,
# interleaved): the same decomposition in an If and inline, 2-7% of a whole decode step at past
# 127-1023 and batch 4 past 511, where the four attention nodes are 10-15% of the step; four
# decode attentions over a Concat-made cache that is also an output (benchmarks/if_cache_cost.py):
# 28-57 us per If against about 110 us per attention at past 1023, 2 us at past 127, not
# resolved from the noise at 4095 (RESULTS.md, "The query-length switch costs decode steps"). A
# prefill's attention is so much larger that its If is noise there. Elsewhere not measured: no
# cost assumed.
SWITCH_COST: dict[str, float] = {CPU: 0.25}


def switch_cost(target: Target) -> float:
    """The fraction of the decode kernel's cost that its ``If`` adds in a decode step."""
    return SWITCH_COST.get(target.provider, 0.0)


def size_bucket(elements: int) -> str:
    return "S" if elements <= 1 << 17 else ("M" if elements <= 1 << 21 else "L")


def features(node: Node, binding: Binding) -> tuple[str, ...]:
    """What the table distinguishes for this node, most significant first."""
    feats: list[str] = []
    attrs = attributes_of(node)
    if isinstance(attrs, NormAttrs) and attrs.has_residual:
        feats.append("residual")
        if len(node.outputs) > 1 and (node.outputs[1].num_uses or node.outputs[1].is_graph_output):
            feats.append("sum_out")
    if isinstance(attrs, AttentionAttrs):
        if attrs.nan_to_zero:
            feats.append("nan_guard")
        if attrs.grouped_query:
            feats.append("grouped")
        q, k = node.inputs[0], node.inputs[1]
        qs, ks = binding.shape(q.shape), binding.shape(k.shape)
        if qs and ks and len(qs) >= 2 and len(ks) >= 2 and is_decode(qs[-2], ks[-2]):
            feats.append("decode")
        if qs and len(qs) >= 2 and qs[-2] >= LONG_QUERIES:
            feats.append("long")
        if qs and ks:
            feats.append(size_bucket(int(np_prod(qs[:-1]) * ks[-2])))
    else:
        xs = binding.shape(node.inputs[0].shape)
        if xs and node.op_type == "RotaryFused" and np_prod(xs) < SMALL_ROTARY:
            feats.append("small")
        if xs:
            feats.append(size_bucket(int(np_prod(xs))))
    return tuple(feats)


# Queries from which causal attention in blocks runs its blocks (causal_blocks.MIN_SEQUENCE,
# not imported: that module emits kernels, this one only prices them).
LONG_QUERIES = 256
SMALL_ROTARY = 1 << 15  # elements of X below which ORT's rotary op does not pay
DECODE_QUERIES = 16  # at most this many queries against more keys: a decode step


def is_decode(queries: int, keys: int) -> bool:
    """Whether attention of ``queries`` over ``keys`` is a decode step: a few new tokens
    against a longer cache (no masked half worth skipping, the cache read dominates)."""
    return queries <= DECODE_QUERIES and keys > queries


def np_prod(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def estimate(kernel: Kernel, node: Node, target: Target, binding: Binding) -> float:
    """The kernel's time relative to the decomposition (most specific table entry wins)."""
    if kernel.backend == Backend.DECOMPOSE and kernel.name == f"decompose.{node.op_type}":
        return 1.0
    feats = features(node, binding)
    # A decode step's entries first: the prefill's more specific ones do not describe it.
    wanted = [lambda combo: "decode" in combo] if "decode" in feats else []
    for accept in (*wanted, lambda combo: True):
        for n in range(len(feats), -1, -1):
            for combo in _subsets(feats, n):
                key = (kernel.name, target.provider, *combo)
                if key in SEED and accept(combo):
                    return SEED[key]
    return kernel.cost


def _subsets(feats: tuple[str, ...], n: int):
    """Ordered sub-tuples of ``feats`` of length ``n`` (earlier features first)."""
    if n == 0:
        yield ()
        return
    for i in range(len(feats)):
        for rest in _subsets(feats[i + 1:], n - 1):
            yield (feats[i], *rest)


def estimates(kernels: list[Kernel], node: Node, target: Target, binding: Binding) -> dict[str, float]:
    return {k.name: estimate(k, node, target, binding) for k in kernels}
