"""AttentionFused on ONNX Runtime's attention operators.

What each operator really computes was checked in ORT (CPU) against the
decomposition, and the records say so:

- ``com.microsoft.MultiHeadAttention``: query ``[B, S, H*D]``; key/value either
  ``[B, L, H*D]`` or already ``[B, H, L, D]`` (used as they are: the fused op's
  K and V need no conversion); ``attention_bias`` ``[B|1, H|1, S, L]`` is added
  to the scaled scores exactly like the decomposition's mask (a mask broadcast
  over queries, ``[B, 1, 1, L]``, is expanded first: MHA rejects it). A row
  whose every key is ``-inf`` gives NaN as in the decomposition; ``nan_to_zero``
  is kept by zeroing NaN in the output (exact whenever V is finite). Equal
  numbers of query and key/value heads only; ``…repeat_kv`` repeats K/V heads
  for grouped-query attention.
- ONNX ``Attention`` (opset 23): BNSH inputs as they are, additive mask (kept one
  step above the type's lowest number, which ORT reads as "no key"),
  grouped-query heads natively, ``softcap`` applied before the mask (checked in
  ORT 1.31, as the fused op does). Legal only where the model already imports
  opset 23 — onnxopt does not convert a model's opset.
- ``com.microsoft.GroupQueryAttention`` always applies its own causal mask from
  per-batch key lengths and takes BSNH inputs (with a cache it also places each row's new
  keys after its ``seqlens_k`` valid ones: refused where the mask carries key padding,
  ``gqa_key_padding``; ``ort_attention_past.py`` has the probe's facts); ``com.microsoft.Attention`` takes the
  hidden state and packed QKV weights. Neither fits a fused op that carries an
  exact mask after the projections; they are listed with those reasons.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.ops import AttentionAttrs, MaskKind
from onnxopt.refusal import Refusal, refusal
from onnxopt.select._checks import bnsh_inputs, no_softcap
from onnxopt.select._emit import i64, scalar, zero_nan
from onnxopt.select.kernel import BOTH_PROVIDERS, MS_DOMAIN, Backend, Kernel, Layout
from onnxopt.select.layout import packed_heads

FLOAT_HALF = frozenset({"float32", "float16"})


def _shapes(node: Node):
    q, k, v = node.inputs[:3]
    return q.shape, k.shape, v.shape


def _mask_dtype(node: Node) -> Refusal | None:
    mask, q = node.input(3), node.inputs[0]
    if mask is not None and mask.dtype != q.dtype:
        return refusal("mask_dtype", f"%{mask.name}: the additive mask is {mask.dtype}, the "
                       f"queries {q.dtype}", mask.name)
    return None


def _mask_rank(node: Node) -> Refusal | None:
    mask = node.input(3)
    if mask is not None and (mask.shape is None or len(mask.shape) > 4):
        return refusal("mask_shape", f"%{mask.name}: the mask's shape is unknown or of rank > 4",
                       mask.name)
    return None


def _mha_requires(repeat_kv: bool):
    def requires(node: Node, attrs: AttentionAttrs, target: Target) -> Refusal | None:
        if reason := bnsh_inputs(node) or _mask_dtype(node) or no_softcap(attrs):
            return reason
        (_, h, _, _), (_, hk, _, _), (_, hv, _, _) = _shapes(node)
        if h != hk or h != hv:
            if not repeat_kv:
                return refusal("grouped_query_not_supported", "needs as many key/value heads "
                               f"as query heads; K/V have {hk}, Q {h} (grouped-query attention)")
        elif repeat_kv:
            return refusal("no_heads_to_repeat", "no grouped-query heads to repeat")
        return _mask_rank(node)
    return requires


def attention_bias(b, node: Node):
    """The exact additive mask as MHA's ``attention_bias`` ``[B|1, H|1, S, L]``."""
    mask = node.input(3)
    if mask is None:
        return None
    q, k = node.inputs[0], node.inputs[1]
    shape = mask.shape
    if (len(shape) == 4 and sd.same(shape[2], q.shape[2]) and sd.same(shape[3], k.shape[2])):
        return mask
    # Broadcast over queries (padding masks are [B, 1, 1, L]): MHA wants every row spelled.
    sizes = b.op("Concat", i64(b, [1, 1], "ones"),
                 b.op("Slice", b.op("Shape", q), i64(b, [2], "start"), i64(b, [3], "end")),
                 b.op("Slice", b.op("Shape", k), i64(b, [2], "start"), i64(b, [3], "end")), axis=0)
    return b.op("Expand", mask, sizes)


def _repeat_heads(b, x, kv_heads: int, rep: int):
    """``[B, Hkv, L, D]`` → ``[B, Hkv*rep, L, D]`` with head ``h`` reading kv head ``h // rep``."""
    d = x.shape[3]
    x5 = b.op("Unsqueeze", x, i64(b, [2], "axis"))
    sizes = b.op("Concat", b.op("Slice", b.op("Shape", x), i64(b, [0], "start"), i64(b, [1], "end")),
                 i64(b, [kv_heads, rep], "heads"),
                 b.op("Slice", b.op("Shape", x), i64(b, [2], "start"), i64(b, [4], "end")), axis=0)
    return b.op("Reshape", b.op("Expand", x5, sizes), i64(b, [0, kv_heads * rep, -1, d], "merge"))


def _emit_mha(repeat_kv: bool):
    def emit(b, node: Node, attrs: AttentionAttrs, target: Target):
        q, k, v = node.inputs[:3]
        heads, head_size = q.shape[1], q.shape[3]
        if repeat_kv:
            rep = heads // k.shape[1]
            k = _repeat_heads(b, k, k.shape[1], rep)
            v = _repeat_heads(b, v, v.shape[1], rep)
        out = b.op("MultiHeadAttention", packed_heads(b, q, heads, head_size), k, v, None, None,
                   attention_bias(b, node), domain=MS_DOMAIN, num_heads=heads,
                   scale=attrs.scale)
        if attrs.nan_to_zero:
            out = zero_nan(b, out, q.dtype)
        return [out]  # packed [B, S, H*Dv]: the kernel's layout is BSH
    return emit


def _attention23_requires(node: Node, attrs: AttentionAttrs, target: Target
                          ) -> Refusal | None:
    if attrs.softcap and target.ort_version < (1, 31):
        return refusal("softcap_unchecked", "soft-caps before the mask as AttentionFused does "
                       "only as checked with ONNX Runtime 1.31; the target is older")
    return _mask_rank(node) or bnsh_inputs(node) or _mask_dtype(node)


def _emit_attention23(b, node: Node, attrs: AttentionAttrs, target: Target):
    q, k, v = node.inputs[:3]
    # ORT's Attention wants the mask's query rows spelled out (no broadcast over them), as
    # MultiHeadAttention does: a scalar, per-key or per-batch bias is expanded to [.., S, L].
    caps = {"softcap": attrs.softcap} if attrs.softcap else {}
    out = b.op("Attention", q, k, v, _above_lowest(b, attention_bias(b, node), q.dtype),
               scale=attrs.scale, **caps)
    if attrs.nan_to_zero:
        out = zero_nan(b, out, q.dtype)
    return [out]


def _above_lowest(b, mask, dtype: str | None):
    """The mask with the type's lowest number moved one step up: ONNX Runtime's Attention (1.31,
    CPU) reads exactly that number (``finfo.min``, what Hugging Face masks fill with) as "no
    key", and gives a query row masked so everywhere zeros instead of the softmax's uniform
    average (the decomposition's, and the model's own). One step above it, the sums round the
    same way for every other row (``exp`` of either is 0 beside any visible key), and a row
    masked everywhere stays a row of equal scores. ``-inf`` and every other value are kept;
    a mask holding both the lowest number and the next above it in one such row is the only
    case this merges."""
    if mask is None:
        return None
    dt = numpy_dtype(dtype or "float32")
    lowest = np.finfo(dt).min
    above = np.nextafter(lowest, dt.type(0), dtype=dt)
    return b.op("Where", b.op("Equal", mask, scalar(b, float(lowest), dtype, "lowest")),
                scalar(b, float(above), dtype, "above_lowest"), mask)


GQA_PADDING = ("writes each row's new keys right after its seqlens_k valid keys and attends to "
               "the first seqlens_k + 1 keys: key padding (the mask's, left or right) has no "
               "spelling, and the model's cache puts new keys after the whole past")


def _gqa_requires(node: Node, attrs: AttentionAttrs, target: Target) -> Refusal | None:
    # Probed in ORT 1.31 (benchmarks/ort_past_probe.py): with any padded row its output and
    # present differ from the model's, left and right padding alike; exact without padding.
    if MaskKind.KEY_PADDING in attrs.mask_kind:
        return refusal("gqa_key_padding", GQA_PADDING)
    return refusal("contract_mismatch", "applies its own causal mask from per-batch key "
                   "lengths (seqlens_k) to BSNH inputs; AttentionFused carries an exact "
                   "additive mask")


def gqa_local_window_size(attrs: AttentionAttrs) -> int | Refusal:
    """``GroupQueryAttention``'s ``local_window_size`` for the node's band (-1: no band), or why
    it has none. ORT 1.31 (CPU) lets each query see ``local_window_size`` keys, itself
    included (checked against the reference: tests/select/test_gqa_window.py), so a causal
    band of ``window`` keys before the query is ``window + 1`` (Mistral's ``sliding_window``).
    GQA masks only causally: a symmetric band (local attention) has no spelling."""
    if not attrs.window:
        return -1
    if not attrs.causal:
        return refusal("band_not_causal", f"a symmetric band (window {attrs.window}) has no "
                       "GroupQueryAttention spelling: its local window is causal")
    return attrs.window + 1


def _contrib_attention_requires(node: Node, attrs: AttentionAttrs, target: Target
                                ) -> Refusal | None:
    return refusal("contract_mismatch", "takes the hidden state and packed QKV projection "
                   "weights; AttentionFused starts after the projections")


def _never(b, node, attrs, target):  # pragma: no cover - never legal, so never emitted
    raise AssertionError("this kernel is never selected")


def kernels() -> list[Kernel]:
    ms = {MS_DOMAIN: 1}
    return [
        Kernel(name="ort.MultiHeadAttention", implements="AttentionFused", backend=Backend.ORT,
               emit=_emit_mha(False), dtypes=FLOAT_HALF,
               providers=BOTH_PROVIDERS, opsets=ms, min_ort=(1, 17),
               requires=_mha_requires(False), cost=1.0, layout=Layout.BSH,
               notes="com.microsoft; Q as [B,S,H*D], K/V BNSH as they are, exact mask as "
                     "attention_bias; NaN guard on the output"),
        Kernel(name="ort.MultiHeadAttention.repeat_kv", implements="AttentionFused",
               backend=Backend.ORT, emit=_emit_mha(True), dtypes=FLOAT_HALF,
               providers=BOTH_PROVIDERS, opsets=ms,
               min_ort=(1, 17), requires=_mha_requires(True), cost=1.1, layout=Layout.BSH,
               notes="grouped-query attention with K/V heads repeated (Expand) for MHA"),
        Kernel(name="onnx.Attention-23", implements="AttentionFused", backend=Backend.ORT,
               emit=_emit_attention23, dtypes=FLOAT_HALF, providers=BOTH_PROVIDERS,
               min_opset=23, min_ort=(1, 23), requires=_attention23_requires, cost=1.0,
               notes="ONNX Attention: BNSH as is, additive mask, GQA native"),
        Kernel(name="ort.GroupQueryAttention", implements="AttentionFused", backend=Backend.ORT,
               emit=_never, dtypes=FLOAT_HALF, providers=BOTH_PROVIDERS, opsets=ms,
               requires=_gqa_requires, notes="causal-with-seqlens only"),
        Kernel(name="ort.Attention", implements="AttentionFused", backend=Backend.ORT, emit=_never,
               dtypes=FLOAT_HALF, providers=BOTH_PROVIDERS, opsets=ms,
               requires=_contrib_attention_requires, notes="packed QKV projection + attention"),
    ]
