"""Kernel records for onnxopt's own CUDA kernels (backend "pycuda") and their emitters.

The records are generated from the kernels' declarations (``kernels/*.json``, "records"):
name, fused op, custom op, cost and notes, with dtypes, minimum compute capability and
determinism read from the same file's specialisations. What is specific to an op (mask
shapes, head sizes, residual shapes) is checked by the ``requires`` functions below, and
each emitter replaces a fused node by a node of domain ``ai.onnxopt.cuda`` (declared with a
CPU and a CUDA kernel in ``onnxopt.runtime.ops``).

| record | fused op | dtypes | custom op |
|---|---|---|---|
| pycuda.flash_attention | AttentionFused | float16, bfloat16 (tensor cores) | FlashAttention |
| pycuda.flash_attention_f32 | AttentionFused | float32 (CUDA cores) | FlashAttention |
| pycuda.layer_norm | LayerNormFused | float16, bfloat16, float32 | LayerNorm |
| pycuda.rms_norm | RMSNormFused | float16, bfloat16, float32 | RMSNorm |
| pycuda.group_norm | GroupNormFused | float16, bfloat16, float32 | GroupNorm |
| pycuda.bias_gelu | GeluFused | float16, bfloat16, float32 | BiasGelu |
| pycuda.swiglu | SwiGLUFused | float16, bfloat16, float32 | SwiGLU |

Portable models: an emitted node records the kernel family (its op type) and the model's facts
(scale, causal, epsilon, the mask as ranges and a bias) and nothing about the device: the
tile and vector width are chosen at load time from the GPU's real limits. Selection checks
that *some* tile fits every GPU the kernel runs on (the smallest per-block shared memory of
the device table), or the target's own limit when it states one.

Masks: attention takes per-row key ranges (left and right padding), a broadcastable additive
bias, causal masking and bands (``window``: sliding-window and local attention, key tiles
outside the band skipped), so every mask kind the attention rule proves (none, causal,
key_padding, additive, and each with a window) runs. Key padding becomes ``kv_start``/``kv_end``
(first kept key, last kept key + 1; tiles outside are skipped) plus the padding as a
``[B, 1, 1, Skv]`` bias of ``0``/``-inf`` (exact even for a mask with holes); any other mask
is passed as the bias itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto

from onnxopt.ir import symdim as sd
from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.ops import (
    ATTENTION,
    FUSED_OPS,
    AttentionAttrs,
    GeluAttrs,
    GroupNormAttrs,
    LayerNormAttrs,
    MaskKind,
    NormAttrs,
    SwiGLUAttrs,
)
from onnxopt.ops.norms import residual_input
from onnxopt.refusal import Refusal, refusal
from onnxopt.runtime.cuda import DOMAIN, OPSET, attention, devices, metadata, norms
from onnxopt.select._checks import no_softcap
from onnxopt.select.kernel import Backend, Kernel, Requires

CUDA_ONLY = frozenset({"CUDAExecutionProvider"})
ATTENTION_MASKS = frozenset({MaskKind.NONE, MaskKind.CAUSAL, MaskKind.KEY_PADDING,
                             MaskKind.CAUSAL | MaskKind.KEY_PADDING, MaskKind.ADDITIVE,
                             # bands: the kernel builds them from ``window`` (tiles outside skipped)
                             MaskKind.CAUSAL | MaskKind.WINDOW, MaskKind.WINDOW,
                             MaskKind.CAUSAL | MaskKind.KEY_PADDING | MaskKind.WINDOW,
                             MaskKind.KEY_PADDING | MaskKind.WINDOW})
_ONNX_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
              "bfloat16": TensorProto.BFLOAT16}


def shared_memory_limit(target: Target) -> int:
    """The per-block shared memory a kernel may rely on: the target's own limit when it states
    one, else the smallest any GPU of compute capability 8.0 or newer allows (the model may
    run on any of them)."""
    if target.shared_memory_bytes:
        return target.shared_memory_bytes

    return devices.portable_smem_limit((8, 0))


@dataclass(frozen=True)
class PyCudaKernel(Kernel):
    """A Kernel record that also names its kernel family and custom op."""

    family: str = ""
    op: str = ""  # the op type in ai.onnxopt.cuda
    supported_masks: frozenset[MaskKind] | None = None
    # The native library a model bound to this kernel needs at serving time (any ORT binding
    # registers it with register_custom_ops_library; `onnxopt kernels --library` prints it).
    runtime_library: str = "libonnxopt_ops"

    def to_json(self) -> dict:
        data = super().to_json()
        data["family"] = self.family
        data["custom_op"] = f"{DOMAIN}::{self.op}"
        if self.supported_masks is not None:
            data["mask_kinds"] = sorted(str(kind) for kind in self.supported_masks)
        return data


# --- metadata ------------------------------------------------------------------------------------


@functools.cache
def _meta(family: str) -> dict[str, Any]:
    return metadata.load(family)


def _variants(family: str, **match: Any) -> list[dict[str, Any]]:
    return [v for v in _meta(family)["variants"] if all(v.get(k) == x for k, x in match.items())]


def smallest_attention_tile(dtype: str, head_size: int) -> tuple[int, tuple[int, int]]:
    """(shared memory, (BM, BN)) of the smallest tile that takes ``head_size``: what must fit
    for the kernel to run at all; the load-time choice takes a larger one where it fits."""

    v = attention.bucket(dtype, head_size)[-1]
    return metadata.smem_bytes("flash_attention", v), (v["BM"], v["BN"])


# --- shared checks -------------------------------------------------------------------------------


def _same_dtype(node: Node, names: dict[int, str], x_dtype: str | None) -> Refusal | None:
    for index, name in names.items():
        value = node.input(index)
        if value is not None and value.dtype != x_dtype:
            return refusal("mixed_dtypes", f"%{value.name}: {name} is {value.dtype}, X is "
                           f"{x_dtype}: the kernel reads every input in one dtype", value.name)
    out = node.outputs[0].dtype
    if out is not None and out != x_dtype:
        return refusal("output_dtype_differs", f"the output is {out}, the input {x_dtype}: the "
                       "kernel writes its input's dtype")
    return None


def _shape_differs(a, b) -> bool:
    """True when two shapes provably differ (ranks, or a pair of known unequal dims)."""
    if a is None or b is None:
        return False
    if len(a) != len(b):
        return True
    return any(x is not None and y is not None and not sd.same(x, y) for x, y in zip(a, b))


def _static_last(node: Node) -> int | None:
    shape = node.inputs[0].shape
    last = shape[-1] if shape else None
    return last if isinstance(last, int) else None


# --- attention -----------------------------------------------------------------------------------


def _attention_requires(node: Node, attrs: AttentionAttrs, target: Target) -> Refusal | None:
    q, _k, v = node.inputs[:3]
    if reason := no_softcap(attrs):
        return reason
    kind = attrs.mask_kind
    if kind not in ATTENTION_MASKS:
        return refusal("mask_kind_unknown", f"does not know the mask kind '{kind}'")
    padding, mask = ATTENTION.input(node, "key_padding_mask"), ATTENTION.input(node, "mask")
    if MaskKind.KEY_PADDING in kind:
        if padding is None:
            return refusal("no_padding_input", "the mask is key padding, but the node does not "
                           "name its padding input")
        if padding.shape is not None and len(padding.shape) != 2:
            return refusal("padding_rank", f"%{padding.name}: the key padding mask has rank "
                           f"{len(padding.shape)}, not 2", padding.name)
    elif kind is MaskKind.ADDITIVE and (mask is None or mask.shape is None
                                        or len(mask.shape) > 4):
        return refusal("mask_shape", "the additive mask's shape is unknown or above rank 4")
    if q.rank not in (3, 4):
        return refusal("q_rank", f"%{q.name}: Q has rank {q.rank}; the kernel takes rank 4 "
                       "(BNSH) or 3", q.name)
    head = attrs.head_size
    if (reason := attention.head_size_reason(q.dtype, head)):
        return refusal("head_size_not_supported", reason)
    dv = v.shape[-1] if v.shape else None
    if dv != head:
        return refusal("value_head_size", f"%{v.name}: V's head size {dv} differs from Q's "
                       f"{head}; the kernel needs one head size", v.name)
    limit = shared_memory_limit(target)
    need, tile = smallest_attention_tile(q.dtype, head)
    if need > limit:
        return refusal("shared_memory", f"needs {need} bytes of shared memory per block even "
                       f"with its smallest tile ({tile[0]}x{tile[1]}), the target allows {limit}")
    return None


def _emit_attention(b, node: Node, attrs: AttentionAttrs, target: Target) -> list:
    q, k, v = node.inputs[:3]
    kind = attrs.mask_kind
    bias = kv_start = kv_end = None
    if MaskKind.KEY_PADDING in kind:
        padding = ATTENTION.input(node, "key_padding_mask")
        keep = _keep(b, padding)
        kv_start, kv_end = _key_range(b, keep, padding.shape)
        bias = _padding_bias(b, keep, q.dtype, padding.shape)
    elif kind is MaskKind.ADDITIVE:
        bias = _as_dtype(b, ATTENTION.input(node, "mask"), q.dtype)
    out = b.op("FlashAttention", q, k, v, bias, kv_start, kv_end, domain=DOMAIN,
               scale=attrs.scale, causal=int(attrs.causal),
               **({"window": attrs.window} if attrs.window else {}))
    if kv_start is not None and averages_no_key_rows(attrs, q, b):
        out = _no_key_rows_average(b, out, q, v, attrs, keep, kv_start, kv_end)
    return [out]


# A fill at or below this absorbs any score: score + fill rounds to the fill itself, so a row
# of nothing but fills weighs every key the same (float32 and bfloat16 minima; float16's is
# -65504, which a score of 16 or more moves).
ABSORBING_FILL = -1e30


def averages_no_key_rows(attrs: AttentionAttrs, q, b) -> bool:
    """Whether the model gives a query that sees no key the mean of V (its mask fills with one
    absorbing value, :data:`ABSORBING_FILL`), which the emitted graph then reproduces where the
    kernel gives 0: BNSH inputs, and an opset with integer Min/Max (12) and Unsqueeze's axes as
    an input (13)."""
    fill = attrs.mask_fill
    return (q.rank == 4 and np.isfinite(fill) and fill <= ABSORBING_FILL
            and int(getattr(b, "opset", 0) or 13) >= 13)


def _no_key_rows_average(b, out, q, v, attrs: AttentionAttrs, keep, start, end):
    """``Where(no_key, mean(V over keys), out)``: the rows whose query sees no key (what the
    kernel leaves 0) get what the model computes there, every key weighed the same. A row sees
    the kept keys in ``[lo, hi)``: its padding range, cut at its position (causal) and to its
    band (a window), as the kernel cuts it; it sees none when the padding mask keeps no key in
    that run (holes inside the range counted, by a prefix sum of the kept keys)."""
    i64 = TensorProto.INT64

    def scalar(x: int, hint: str):
        return b.const(np.array(x, np.int64), hint)

    def axes(*a: int):
        return b.const(np.array(a, np.int64), "axes")

    keys = b.op("Gather", b.op("Shape", v), scalar(2, "seq_axis"), axis=0)
    lo = b.op("Unsqueeze", b.op("Cast", start, to=i64), axes(1))  # [B, 1]
    hi = b.op("Unsqueeze", b.op("Cast", end, to=i64), axes(1))
    if attrs.causal or attrs.window:
        # the query's position among the keys: i + Skv - Sq, as the kernel's causal offset
        queries = b.op("Gather", b.op("Shape", q), scalar(2, "seq_axis"), axis=0)
        pos = b.op("Add", b.op("Range", scalar(0, "zero"), queries, scalar(1, "one")),
                   b.op("Sub", keys, queries))
    if attrs.window:
        lo = b.op("Max", lo, b.op("Sub", pos, scalar(attrs.window, "window")))
    if attrs.causal:
        hi = b.op("Min", hi, b.op("Add", pos, scalar(1, "one")))
    elif attrs.window:
        hi = b.op("Min", hi, b.op("Add", pos, scalar(attrs.window + 1, "window_end")))
    zero = scalar(0, "zero")
    lo = b.op("Min", b.op("Max", lo, zero), keys)
    hi = b.op("Min", b.op("Max", hi, lo), keys)
    # kept keys before each position 0 .. Skv: [B, Skv + 1], a column of 0 then the prefix sum
    kept = b.op("CumSum", b.op("Cast", keep, to=i64), scalar(1, "axis"))
    first = b.op("Slice", kept, axes(0), axes(1), axes(1))
    before = b.op("Concat", b.op("Sub", first, first), kept, axis=1)
    seen = b.op("Sub", b.op("GatherElements", before, hi, axis=1),
                b.op("GatherElements", before, lo, axis=1))  # kept keys in [lo, hi): [B, Sq]
    no_key = b.op("Unsqueeze", b.op("LessOrEqual", seen, zero), axes(1, 3))  # [B, 1, Sq, 1]
    mean = _reduce(b, "ReduceMean", v, axis=2, keepdims=1)  # [B, Hkv, 1, D]
    heads, kv_heads = attrs.num_heads, attrs.kv_heads
    if heads and kv_heads and heads != kv_heads:  # each query head reads its group's mean
        grouped = b.op("Expand", b.op("Unsqueeze", mean, axes(2)),
                       b.const(np.array([1, 1, heads // kv_heads, 1, 1], np.int64), "repeat"))
        mean = b.op("Reshape", grouped, b.const(np.array([0, heads, 1, -1], np.int64), "heads"))
    result = b.op("Where", no_key, mean, out)
    return _typed(result, out.dtype, out.shape)


def _keep(b, mask):
    """bool [B, Skv]: the padding mask's nonzero entries (keys to keep)."""
    if mask.dtype == "bool":
        return mask
    return _typed(b.op("Cast", mask, to=TensorProto.BOOL), "bool", mask.shape)


def _key_range(b, keep, shape):
    """int32 [B] each: the first kept key, and the last kept key + 1 (0, 0 for a row that
    keeps none). Left and right padding alike; a hole inside stays in the range (the padding
    bias masks it)."""
    batch = (shape[0],) if shape else None
    ints = _typed(b.op("Cast", keep, to=TensorProto.INT32), "int32", shape)
    first = b.op("ArgMax", ints, axis=1, keepdims=0)  # first maximum: the first kept key
    start = _typed(b.op("Cast", _typed(first, "int64", batch), to=TensorProto.INT32), "int32",
                   batch)
    zeros = _typed(b.op("Sub", ints, ints), "int32", shape)
    ones = _typed(b.op("Add", zeros, b.const(np.array(1, np.int32), "one")), "int32", shape)
    positions = _typed(b.op("CumSum", ones, b.const(np.array(1, np.int32), "axis")), "int32",
                       shape)  # 1 .. Skv in every row
    kept_positions = _typed(b.op("Mul", ints, positions), "int32", shape)
    end = _reduce(b, "ReduceMax", kept_positions, axis=1, keepdims=0)
    return start, _typed(end, "int32", batch)


def _reduce(b, op: str, x, *, axis: int, keepdims: int):
    """``op`` (ReduceMax, ReduceMean) over one axis, its axes an input from opset 18 on."""
    if int(getattr(b, "opset", 0) or 18) >= 18:
        return b.op(op, x, b.const(np.array([axis], np.int64), "axes"), keepdims=keepdims)
    return b.op(op, x, axes=[axis], keepdims=keepdims)


def _padding_bias(b, keep, dtype: str, shape):
    """[B, 1, 1, Skv] of dtype: 0 where a key is kept, -inf where it is padding."""

    np_dtype = numpy_dtype(dtype)
    zero = b.const(np.array(0, np_dtype), "zero")
    minus_inf = b.const(np.array(-np.inf, np_dtype), "minus_inf")
    flat = _typed(b.op("Where", keep, zero, minus_inf), dtype, shape)
    full = (shape[0], 1, 1, shape[1]) if shape else None
    if int(getattr(b, "opset", 0) or 13) >= 13:
        out = b.op("Unsqueeze", flat, b.const(np.array([1, 2], np.int64), "axes"))
    else:
        out = b.op("Unsqueeze", flat, axes=[1, 2])
    return _typed(out, dtype, full)


def _as_dtype(b, value, dtype: str):
    if value.dtype == dtype:
        return value
    return _typed(b.op("Cast", value, to=_ONNX_TYPE[dtype]), dtype, value.shape)


def _typed(value, dtype: str, shape):
    value.dtype, value.shape = dtype, shape
    return value


# --- norms ---------------------------------------------------------------------------------------

def _norm_inputs(node: Node, attrs: NormAttrs) -> dict[int, str]:
    """The inputs after X by position and port name (the residual only where it is folded)."""
    ports = FUSED_OPS[node.op_type].inputs
    return {k: port.name for k, port in enumerate(ports)
            if k and (port.name != "residual" or attrs.has_residual)}


def _norm_reason(dtype: str, hidden: int) -> str:
    try:
        norms.select_variant(dtype, hidden)
    except ValueError as error:
        return str(error)
    return ""


def _norm_requires(node: Node, attrs: NormAttrs, target: Target) -> Refusal | None:
    x = node.inputs[0]
    if isinstance(attrs, LayerNormAttrs) and attrs.axis not in (-1, (x.rank or 0) - 1):
        return refusal("not_last_axis", f"normalises over axis {attrs.axis}; the kernel takes "
                       "the last axis only")
    compute = attrs.compute_dtype or x.dtype
    if compute not in (x.dtype, "float32"):
        return refusal("compute_dtype_differs", f"computes its statistics in {compute}; the "
                       "kernel computes them in float32")
    if (reason := _same_dtype(node, _norm_inputs(node, attrs), x.dtype)):
        return reason
    residual = residual_input(node, attrs)
    if len(node.outputs) > 1 and residual is None:
        return refusal("sum_without_residual", "writes the sum output S only together with a "
                       "residual input")
    if residual is not None and _shape_differs(residual.shape, x.shape):
        return refusal("residual_shape", f"%{residual.name}: the residual "
                       f"{list(residual.shape)} is not shaped like X {list(x.shape)}; the "
                       "kernel does not broadcast", residual.name)
    hidden = _static_last(node)
    if hidden is None:
        return refusal("hidden_size_unknown", f"%{x.name}: the hidden size is not static",
                       x.name)
    if reason := _norm_reason(x.dtype, hidden):
        return refusal("hidden_size_not_supported", reason, x.name)
    return None


def _emit_norm(op: str):
    def emit(b, node: Node, attrs: NormAttrs, target: Target) -> list:
        x = node.inputs[0]
        residual = residual_input(node, attrs)
        params = [node.input(1)] + ([node.input(2)] if op == "LayerNorm" else []) + [residual]
        inputs = _trim([x, *params])
        count = len(node.outputs)
        outs = b.op(op, *inputs, domain=DOMAIN, outputs=count, epsilon=attrs.epsilon)
        return list(outs) if count > 1 else [outs]

    return emit


def _trim(inputs: list) -> list:
    while inputs and inputs[-1] is None:
        inputs.pop()
    return inputs


# --- group norm ----------------------------------------------------------------------------------

_GROUP_INPUTS = {1: "gamma", 2: "beta"}


def _group_norm_requires(node: Node, attrs: GroupNormAttrs, target: Target) -> Refusal | None:
    """X [N, C, ...] with C static and a multiple of ``groups``, gamma/beta [C] in X's dtype.
    A group whose size is known only at run time (symbolic spatial dims) is accepted: the
    kernel's limit is 2^30 elements per group, and the launch refuses a larger one."""
    x = node.inputs[0]
    activation = attrs.activation
    if activation not in _meta("group_norm")["activations"]:
        return refusal("activation_not_supported", f"applies the activation {activation!r}; "
                       "the kernel applies none or 'silu'")
    if (reason := _same_dtype(node, _GROUP_INPUTS, x.dtype)):
        return reason
    if x.shape is None or len(x.shape) < 2:
        return refusal("x_rank", f"%{x.name}: the shape is unknown or below rank 2; the kernel "
                       "takes [N, C, ...]", x.name)
    channels = x.shape[1]
    if not isinstance(channels, int):
        return refusal("channels_unknown", f"%{x.name}: the channel count {channels} is not "
                       "static", x.name)
    groups = attrs.groups
    if groups <= 0 or channels % groups:
        return refusal("groups_do_not_split", f"%{x.name}: {channels} channels do not split "
                       f"into {groups} groups", x.name)
    for index, name in _GROUP_INPUTS.items():
        value = node.input(index)
        if value is not None and (value.shape is None
                                  or _shape_differs(value.shape, (channels,))):
            shape = list(value.shape) if value.shape is not None else "unknown"
            return refusal("per_channel_shape", f"%{value.name}: {name} has shape {shape}; the "
                           f"kernel takes one value per channel ([{channels}])", value.name)
    spatial = x.shape[2:]
    if all(isinstance(d, int) for d in spatial):
        group = channels // groups * int(np.prod(spatial, dtype=np.int64))
        if (reason := norms.group_size_reason(group)):
            return refusal("group_too_large", f"%{x.name}: {reason}", x.name)
    batch, limit = x.shape[0], _meta("group_norm")["max_blocks"]
    if isinstance(batch, int) and batch * groups > limit:
        return refusal("too_many_blocks", f"%{x.name}: {batch * groups} blocks (batch x "
                       f"groups), more than the {limit} a grid holds", x.name)
    return None


def _emit_group_norm(b, node: Node, attrs: GroupNormAttrs, target: Target) -> list:
    inputs = _trim([node.inputs[0], node.input(1), node.input(2)])
    out = b.op("GroupNorm", *inputs, domain=DOMAIN, groups=attrs.groups,
               epsilon=attrs.epsilon, activation=attrs.activation)
    return [out]


# --- activations ---------------------------------------------------------------------------------


def _gelu_requires(node: Node, attrs: GeluAttrs, target: Target) -> Refusal | None:
    x, bias = node.inputs[0], node.input(1)
    approximate = attrs.approximate
    if approximate not in ("none", "tanh"):
        return refusal("gelu_flavour", f"approximates GELU as {approximate!r}; the kernel knows "
                       "'none' and 'tanh'")
    if (reason := _same_dtype(node, {1: "bias"}, x.dtype)):
        return reason
    if bias is not None:
        cols = x.shape[-1] if x.shape else None
        if bias.shape is None or len(bias.shape) != 1 or _shape_differs(bias.shape, (cols,)):
            shape = list(bias.shape) if bias.shape is not None else "unknown"
            return refusal("bias_shape", f"%{bias.name}: the bias has shape {shape}; the kernel "
                           f"adds a bias over the last axis ([{cols}]) only", bias.name)
    return None


def _emit_gelu(b, node: Node, attrs: GeluAttrs, target: Target) -> list:
    x = node.inputs[0]
    out = b.op("BiasGelu", *_trim([x, node.input(1)]), domain=DOMAIN,
               approximate=attrs.approximate)
    return [out]


def _swiglu_requires(node: Node, attrs: SwiGLUAttrs, target: Target) -> Refusal | None:
    gate, up = node.inputs[:2]
    if (reason := _same_dtype(node, {1: "up"}, gate.dtype)):
        return reason
    if gate.shape is None or up.shape is None or _shape_differs(gate.shape, up.shape):
        return refusal("shapes_differ", f"%{up.name}: gate and up are not provably one shape; "
                       "the kernel does not broadcast", up.name)
    return None


def _emit_swiglu(b, node: Node, attrs: SwiGLUAttrs, target: Target) -> list:
    gate, up = node.inputs[:2]
    return [b.op("SwiGLU", gate, up, domain=DOMAIN)]


# --- the records ---------------------------------------------------------------------------------

Hook = tuple[Requires, Callable[..., list]]
# What is specific to each custom op: its legality check and its emitter. Everything else about
# a record comes from the kernel's declaration.
HOOKS: dict[str, Hook] = {
    "FlashAttention": (_attention_requires, _emit_attention),
    "LayerNorm": (_norm_requires, _emit_norm("LayerNorm")),
    "RMSNorm": (_norm_requires, _emit_norm("RMSNorm")),
    "GroupNorm": (_group_norm_requires, _emit_group_norm),
    "BiasGelu": (_gelu_requires, _emit_gelu),
    "SwiGLU": (_swiglu_requires, _emit_swiglu),
}


# The attention kernels skip every key outside a row's range: a query that sees no key at all
# (left padding under a causal mask, a row padded everywhere) has nothing to average and gives
# 0. The model's own softmax there averages the values over its masked keys (its mask's fill is
# a finite number) or gives NaN (-inf).
NO_KEY_IS_ZERO = ("a query that sees no key (left padding under a causal mask) gives 0, where "
                  "the model averages the values of its masked keys (reproduced after the "
                  "kernel where the mask fills with one value at or below -1e30)")


def pycuda_kernels() -> list[Kernel]:
    """The records, built from the kernels' declarations (if they cannot be read, records
    that refuse with the reason, so that selection still works and says why)."""
    try:
        return _records()
    except (OSError, KeyError, ValueError) as error:
        reason = refusal("metadata_unreadable", f"the CUDA kernels' metadata cannot be read "
                         f"({error}); set ONNXOPT_KERNELS_DIR to the kernels/ folder")
        ops = {"AttentionFused": "FlashAttention", "LayerNormFused": "LayerNorm",
               "RMSNormFused": "RMSNorm", "GroupNormFused": "GroupNorm",
               "GeluFused": "BiasGelu", "SwiGLUFused": "SwiGLU"}
        return [PyCudaKernel(name=f"pycuda.{op.lower()}", implements=fused,
                             backend=Backend.PYCUDA, emit=_emit_attention, providers=CUDA_ONLY,
                             op=op, cost=0.5, requires=lambda node, attrs, target: reason)
                for fused, op in ops.items()]


def _records() -> list[Kernel]:
    records = []
    for family in metadata.FAMILIES:
        meta = _meta(family)
        for rec in meta["records"]:
            match = {k: rec[k] for k in ("kind",) if k in rec}
            if "variant_op" in rec:
                match["op"] = rec["variant_op"]
            variants = _variants(family, **match)
            requires, emit = HOOKS[rec["op"]]
            records.append(PyCudaKernel(
                name=rec["name"], implements=rec["implements"], backend=Backend.PYCUDA,
                emit=emit,
                dtypes=frozenset(v["dtype"] for v in variants),
                min_compute_capability=max(metadata.min_compute_capability(family, v)
                                           for v in variants),
                grouped_query=bool(meta.get("gqa", True)), causal=True,
                deterministic=bool(meta["deterministic"]), cost=float(rec["cost"]),
                requires=requires, family=family, op=rec["op"],
                supported_masks=ATTENTION_MASKS if rec["op"] == "FlashAttention" else None,
                assumes=NO_KEY_IS_ZERO if rec["op"] == "FlashAttention" else "",
                notes=rec["notes"], providers=CUDA_ONLY, opsets={DOMAIN: OPSET}))
    return records
