"""Kernel records for onnxopt's own CUDA kernels (backend "pycuda") and their emitters.

Capabilities come from the launch metadata beside each source (``kernels/*.json``): dtypes,
head dims, minimum compute capability, shared memory as a formula of the tile, determinism.
Each emitter replaces a fused node by a node of domain ``ai.onnxopt.cuda`` (declared with a
CPU and a CUDA kernel in ``onnxopt.runtime.ops``) that names the kernel's template
specialisation in its attributes.

| record | fused op | dtypes | custom op |
|---|---|---|---|
| pycuda.flash_attention | AttentionFused | float16, bfloat16 (tensor cores) | FlashAttention |
| pycuda.flash_attention_f32 | AttentionFused | float32 (CUDA cores) | FlashAttention |
| pycuda.layer_norm | LayerNormFused | float16, bfloat16, float32 | LayerNorm |
| pycuda.rms_norm | RMSNormFused | float16, bfloat16, float32 | RMSNorm |
| pycuda.bias_gelu | GeluFused | float16, bfloat16, float32 | BiasGelu |
| pycuda.swiglu | SwiGLUFused | float16, bfloat16, float32 | SwiGLU |

All run only on ``CUDAExecutionProvider`` with compute capability 8.0 or more, and all are
deterministic (one block owns each output element; no atomics, fixed reduction order), so
``determinism="strict"`` does not reject them.

Key padding: the attention kernel takes one valid-key count per batch row, not a mask. The
emitter computes ``kv_lens = ReduceSum(Cast(Cast(key_padding_mask, bool), int32), axis 1)``,
which equals the mask only for *right-padded* rows (kept keys, then padding). That cannot be
proved from the graph, so the node also receives the mask itself and its kernels check every
call, raising on a left-padded row or a hole (``onnxopt.runtime.ops.right_padded_lengths``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto

from onnxopt.ir import symdim as sd
from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.select.kernel import Kernel
from onnxopt.select.registry import register_loader

DOMAIN = "ai.onnxopt.cuda"
OPSET = 1
CUDA_ONLY = frozenset({"CUDAExecutionProvider"})
ATTENTION_MASKS = frozenset({"none", "causal", "key_padding", "causal+key_padding"})

# Shared memory one block may opt into, by compute capability, for targets that do not say.
OPTIN_SHARED_MEMORY = {(8, 0): 163 * 1024, (8, 7): 163 * 1024, (9, 0): 227 * 1024,
                       (10, 0): 227 * 1024}
OTHER_SHARED_MEMORY = 99 * 1024  # sm_86, sm_89, sm_120: the consumer parts


def shared_memory_limit(target: Target) -> int:
    """The target's per-block shared memory, or the architecture's opt-in limit if unset."""
    if target.shared_memory_bytes:
        return target.shared_memory_bytes
    return OPTIN_SHARED_MEMORY.get(tuple(target.compute_capability), OTHER_SHARED_MEMORY)


@dataclass(frozen=True)
class PyCudaKernel(Kernel):
    """A Kernel record that also names its kernel family and custom op."""

    family: str = ""
    op: str = ""  # the op type in ai.onnxopt.cuda
    supported_masks: frozenset[str] | None = None

    def to_json(self) -> dict:
        data = super().to_json()
        data["family"] = self.family
        data["custom_op"] = f"{DOMAIN}::{self.op}"
        if self.supported_masks is not None:
            data["mask_kinds"] = sorted(self.supported_masks)
        return data


# --- metadata ------------------------------------------------------------------------------------


@functools.cache
def _meta(family: str) -> dict[str, Any]:
    from onnxopt.runtime.cuda import metadata

    return metadata.load(family)


def _variants(family: str, **match: Any) -> list[dict[str, Any]]:
    return [v for v in _meta(family)["variants"] if all(v.get(k) == x for k, x in match.items())]


def attention_variant(dtype: str, head_size: int, limit: int) -> tuple[dict | None, int, tuple]:
    """(widest tile variant that fits ``limit`` bytes or None, its or the smallest tile's
    shared memory, that tile as (BM, BN))."""
    from onnxopt.runtime.cuda import metadata

    options = sorted(_variants("flash_attention", dtype=dtype, head_dim=head_size),
                     key=lambda v: (-v["BM"], -v["BN"]))
    need = 0
    tile: tuple = ()
    for v in options:
        need, tile = metadata.smem_bytes("flash_attention", v), (v["BM"], v["BN"])
        if need <= limit:
            return v, need, tile
    return None, need, tile


# --- shared checks -------------------------------------------------------------------------------


def _same_dtype(node: Node, names: dict[int, str], x_dtype: str | None) -> str | None:
    for index, name in names.items():
        value = node.input(index)
        if value is not None and value.dtype != x_dtype:
            return (f"%{value.name}: {name} is {value.dtype}, X is {x_dtype}: the kernel reads "
                    "every input in one dtype")
    out = node.outputs[0].dtype
    if out is not None and out != x_dtype:
        return f"the output is {out}, the input {x_dtype}: the kernel writes its input's dtype"
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


def _attention_requires(node: Node, target: Target) -> str | None:
    q, _k, v = node.inputs[:3]
    layout = node.attr("layout", "BNSH")
    if layout != "BNSH":
        return f"takes the BNSH layout, the node's is {layout}"
    kind = node.attr("mask_kind", "none")
    if kind not in ATTENTION_MASKS:
        return "our kernel takes key padding as lengths, not an additive mask"
    padding = node.input(4)
    if "key_padding" in kind:
        if padding is None:
            return "the mask is key padding, but the node does not name its padding input"
        if padding.shape is not None and len(padding.shape) != 2:
            return f"%{padding.name}: the key padding mask has rank {len(padding.shape)}, not 2"
    if q.rank not in (3, 4):
        return f"%{q.name}: Q has rank {q.rank}; the kernel takes rank 4 (BNSH) or 3"
    head = node.attr("head_size", 0)
    dv = v.shape[-1] if v.shape else None
    if dv != head:
        return (f"%{v.name}: V's head size {dv} differs from Q's {head}; the kernel needs one "
                "head size")
    limit = shared_memory_limit(target)
    variant, need, tile = attention_variant(q.dtype, head, limit)
    if variant is None:
        return (f"needs {need} bytes of shared memory per block even with its smallest tile "
                f"({tile[0]}x{tile[1]}), the target allows {limit}")
    return None


def _emit_attention(b, node: Node, target: Target) -> list:
    q, k, v = node.inputs[:3]
    kind = node.attr("mask_kind", "none")
    variant, _, _ = attention_variant(q.dtype, node.attr("head_size", 0),
                                      shared_memory_limit(target))
    inputs = [q, k, v]
    if "key_padding" in kind:
        mask = node.input(4)
        inputs += [_lengths(b, mask), mask]
    out = b.op("FlashAttention", *inputs, domain=DOMAIN, kernel=variant["entry"],
               tile_m=variant["BM"], tile_n=variant["BN"], warps=variant["WARPS"],
               scale=float(node.attr("scale", 1.0)), causal=int(node.attr("causal", 0)))
    return [out]


def _lengths(b, mask):
    """int32 [B]: the number of nonzero entries in each row of the [B, Skv] padding mask."""
    keep = mask if mask.dtype == "bool" else _typed(b.op("Cast", mask, to=TensorProto.BOOL),
                                                    "bool", mask.shape)
    ints = _typed(b.op("Cast", keep, to=TensorProto.INT32), "int32", mask.shape)
    batch = (mask.shape[0],) if mask.shape else None
    if int(getattr(b, "opset", 0) or 13) >= 13:
        axes = b.const(np.array([1], np.int64), "axes")
        lens = b.op("ReduceSum", ints, axes, keepdims=0)
    else:
        lens = b.op("ReduceSum", ints, axes=[1], keepdims=0)
    return _typed(lens, "int32", batch)


def _typed(value, dtype: str, shape):
    value.dtype, value.shape = dtype, shape
    return value


# --- norms ---------------------------------------------------------------------------------------

_RESIDUAL = {"LayerNormFused": 3, "RMSNormFused": 2}
_NORM_INPUTS = {"LayerNormFused": {1: "gamma", 2: "beta", 3: "residual"},
                "RMSNormFused": {1: "gamma", 2: "residual"}}


def _norm_residual(node: Node):
    return node.input(_RESIDUAL[node.op_type]) if node.attr("has_residual", 0) else None


def _norm_variant(dtype: str, hidden: int) -> tuple[dict | None, str]:
    from onnxopt.runtime.cuda import norms

    try:
        return norms.select_variant(dtype, hidden)[0], ""
    except ValueError as error:
        return None, str(error)


def _norm_requires(node: Node, target: Target) -> str | None:
    x = node.inputs[0]
    if node.op_type == "LayerNormFused" and node.attr("axis", -1) not in (-1, (x.rank or 0) - 1):
        return f"normalises over axis {node.attr('axis')}; the kernel takes the last axis only"
    compute = node.attr("compute_dtype", "") or x.dtype
    if compute not in (x.dtype, "float32"):
        return f"computes its statistics in {compute}; the kernel computes them in float32"
    inputs = {i: n for i, n in _NORM_INPUTS[node.op_type].items()
              if n != "residual" or node.attr("has_residual", 0)}
    if (reason := _same_dtype(node, inputs, x.dtype)):
        return reason
    residual = _norm_residual(node)
    if len(node.outputs) > 1 and residual is None:
        return "writes the sum output S only together with a residual input"
    if residual is not None and _shape_differs(residual.shape, x.shape):
        return (f"%{residual.name}: the residual {list(residual.shape)} is not shaped like X "
                f"{list(x.shape)}; the kernel does not broadcast")
    hidden = _static_last(node)
    if hidden is None:
        return f"%{x.name}: the hidden size is not static"
    _variant, reason = _norm_variant(x.dtype, hidden)
    return reason or None


def _emit_norm(op: str):
    def emit(b, node: Node, target: Target) -> list:
        x = node.inputs[0]
        variant, _ = _norm_variant(x.dtype, _static_last(node))
        residual = _norm_residual(node)
        params = [node.input(1)] + ([node.input(2)] if op == "LayerNorm" else []) + [residual]
        inputs = _trim([x, *params])
        count = len(node.outputs)
        outs = b.op(op, *inputs, domain=DOMAIN, outputs=count,
                    epsilon=float(node.attr("epsilon", 1e-5 if op == "LayerNorm" else 1e-6)),
                    kernel=variant["entry"])
        return list(outs) if count > 1 else [outs]

    return emit


def _trim(inputs: list) -> list:
    while inputs and inputs[-1] is None:
        inputs.pop()
    return inputs


# --- activations ---------------------------------------------------------------------------------


def _activation_entry(op: str, dtype: str, cols: int | None) -> str:
    """The widest vector variant ``cols`` allows ("" when cols is not static: chosen at launch)."""
    from onnxopt.runtime.cuda import activations

    if cols is None:
        return ""
    return activations.select_variant(op, dtype, cols)["entry"]


def _gelu_requires(node: Node, target: Target) -> str | None:
    x, bias = node.inputs[0], node.input(1)
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        return f"approximates GELU as {approximate!r}; the kernel knows 'none' and 'tanh'"
    if (reason := _same_dtype(node, {1: "bias"}, x.dtype)):
        return reason
    if bias is not None:
        cols = x.shape[-1] if x.shape else None
        if bias.shape is None or len(bias.shape) != 1 or _shape_differs(bias.shape, (cols,)):
            shape = list(bias.shape) if bias.shape is not None else "unknown"
            return (f"%{bias.name}: the bias has shape {shape}; the kernel adds a bias over "
                    f"the last axis ([{cols}]) only")
    return None


def _emit_gelu(b, node: Node, target: Target) -> list:
    x = node.inputs[0]
    out = b.op("BiasGelu", *_trim([x, node.input(1)]), domain=DOMAIN,
               approximate=node.attr("approximate", "none"),
               kernel=_activation_entry("gelu", x.dtype, _static_last(node)))
    return [out]


def _swiglu_requires(node: Node, target: Target) -> str | None:
    gate, up = node.inputs[:2]
    if (reason := _same_dtype(node, {1: "up"}, gate.dtype)):
        return reason
    if gate.shape is None or up.shape is None or _shape_differs(gate.shape, up.shape):
        return (f"%{up.name}: gate and up are not provably one shape; the kernel does not "
                "broadcast")
    return None


def _emit_swiglu(b, node: Node, target: Target) -> list:
    gate, up = node.inputs[:2]
    out = b.op("SwiGLU", gate, up, domain=DOMAIN,
               kernel=_activation_entry("swiglu", gate.dtype, _static_last(node)))
    return [out]


# --- the records ---------------------------------------------------------------------------------


def pycuda_kernels() -> list[Kernel]:
    """The records, built from the kernels' JSON metadata (if it cannot be read, records
    that refuse with the reason, so that selection still works and says why)."""
    try:
        return _records()
    except (OSError, KeyError, ValueError) as error:
        reason = (f"the CUDA kernels' metadata cannot be read ({error}); "
                  "set ONNXOPT_KERNELS_DIR to the kernels/ folder")
        ops = {"AttentionFused": "FlashAttention", "LayerNormFused": "LayerNorm",
               "RMSNormFused": "RMSNorm", "GeluFused": "BiasGelu", "SwiGLUFused": "SwiGLU"}
        return [PyCudaKernel(name=f"pycuda.{op.lower()}", implements=fused, backend="pycuda",
                             emit=_emit_attention, providers=CUDA_ONLY, op=op, cost=0.5,
                             requires=lambda node, target: reason)
                for fused, op in ops.items()]


def _records() -> list[Kernel]:
    attention = _meta("flash_attention")
    tc_dims = frozenset(v["head_dim"] for v in _variants("flash_attention", kind="tc"))
    simt_dims = frozenset(v["head_dim"] for v in _variants("flash_attention", kind="simt"))
    common = {"backend": "pycuda", "providers": CUDA_ONLY, "opsets": {DOMAIN: OPSET}}

    def cc(family: str, kind: str | None = None) -> tuple[int, int]:
        meta = _meta(family)
        value = meta["kinds"][kind]["min_compute_capability"] if kind else meta[
            "min_compute_capability"]
        return tuple(value)

    def dtypes(family: str, **match: Any) -> frozenset[str]:
        return frozenset(v["dtype"] for v in _variants(family, **match))

    return [
        PyCudaKernel(
            name="pycuda.flash_attention", implements="AttentionFused", emit=_emit_attention,
            dtypes=dtypes("flash_attention", kind="tc"),
            min_compute_capability=cc("flash_attention", "tc"), head_dims=tc_dims,
            grouped_query=bool(attention["gqa"]), causal=True,
            deterministic=bool(attention["deterministic"]), cost=0.4,
            requires=_attention_requires, family="flash_attention", op="FlashAttention",
            supported_masks=ATTENTION_MASKS,
            notes="FlashAttention-2 forward on tensor cores (mma.sync, fp32 accumulation); "
                  "key padding as per-row lengths (right padding, checked per call); "
                  "shared memory (BM + 4*BN)*(D + 8)*2 bytes per block",
            **common),
        PyCudaKernel(
            name="pycuda.flash_attention_f32", implements="AttentionFused",
            emit=_emit_attention, dtypes=dtypes("flash_attention", kind="simt"),
            min_compute_capability=cc("flash_attention", "simt"), head_dims=simt_dims,
            grouped_query=bool(attention["gqa"]), causal=True,
            deterministic=bool(attention["deterministic"]), cost=0.9,
            requires=_attention_requires, family="flash_attention", op="FlashAttention",
            supported_masks=ATTENTION_MASKS,
            notes="float32 tiled attention on CUDA cores (streaming softmax); ranked below "
                  "ONNX Runtime's own float32 attention",
            **common),
        PyCudaKernel(
            name="pycuda.layer_norm", implements="LayerNormFused", emit=_emit_norm("LayerNorm"),
            dtypes=dtypes("layer_norm"), min_compute_capability=cc("layer_norm"),
            deterministic=bool(_meta("layer_norm")["deterministic"]), cost=0.45,
            requires=_norm_requires, family="layer_norm", op="LayerNorm",
            notes="one pass, vectorised, residual add and sum output folded in", **common),
        PyCudaKernel(
            name="pycuda.rms_norm", implements="RMSNormFused", emit=_emit_norm("RMSNorm"),
            dtypes=dtypes("layer_norm"), min_compute_capability=cc("layer_norm"),
            deterministic=bool(_meta("layer_norm")["deterministic"]), cost=0.45,
            requires=_norm_requires, family="layer_norm", op="RMSNorm",
            notes="one pass, vectorised, residual add and sum output folded in", **common),
        PyCudaKernel(
            name="pycuda.bias_gelu", implements="GeluFused", emit=_emit_gelu,
            dtypes=dtypes("activations", op="gelu"), min_compute_capability=cc("activations"),
            deterministic=bool(_meta("activations")["deterministic"]), cost=0.5,
            requires=_gelu_requires, family="activations", op="BiasGelu",
            notes="bias + GELU (erf or tanh), vectorised grid-stride", **common),
        PyCudaKernel(
            name="pycuda.swiglu", implements="SwiGLUFused", emit=_emit_swiglu,
            dtypes=dtypes("activations", op="swiglu"), min_compute_capability=cc("activations"),
            deterministic=bool(_meta("activations")["deterministic"]), cost=0.5,
            requires=_swiglu_requires, family="activations", op="SwiGLU",
            notes="silu(gate) * up, vectorised grid-stride", **common),
    ]


register_loader(pycuda_kernels)
