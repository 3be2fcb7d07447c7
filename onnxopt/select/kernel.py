"""A kernel record: what one implementation of a fused op can do, and how to emit it.

Selection compares a fused node's requirements with these capabilities; the
first capability a kernel lacks is its rejection reason, a :class:`Refusal`.
Capabilities are what the implementation *really* does — each ORT record was
checked numerically against the fused op's decomposition (tests/select/) —
not what its documentation suggests.

A kernel reads the fused node's attributes only through the op's attribute record
(``onnxopt.ops``): ``requires(node, attrs, target)`` and ``emit(b, node, attrs, target)``
receive it, read once per node by selection, and the node for its inputs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.ops import AttentionAttrs, FusedAttrs, attributes_of
from onnxopt.ops.attention import reads_probabilities
from onnxopt.refusal import Refusal, refusal

ALL_FLOATS = frozenset({"float32", "float16", "bfloat16", "float64"})
CPU = frozenset({"CPUExecutionProvider"})
CUDA = frozenset({"CUDAExecutionProvider"})
BOTH_PROVIDERS = CPU | CUDA
MS_DOMAIN = "com.microsoft"




class Backend(enum.StrEnum):
    """What a kernel's emitted nodes are: ONNX Runtime's own ops, our CUDA custom ops, or
    standard ONNX ops computing the fused op's function."""

    ORT = "ort"
    PYCUDA = "pycuda"
    DECOMPOSE = "decompose"


class Layout(enum.StrEnum):
    """The layout a kernel's attention nodes read Q in and write O in (select/layout.py)."""

    BNSH = "BNSH"  # [B, H, S, D], as the fused op
    BSH = "BSH"  # [B, S, H*D]: the model's own head split and merge are read through


Requires = Callable[[Node, Any, Target], Refusal | None]
Emit = Callable[[Any, Node, Any, Target], list]


def provider_names(providers: frozenset[str]) -> str:
    return " and ".join(sorted(p.removesuffix("ExecutionProvider") for p in providers))


@dataclass(frozen=True)
class Kernel:
    """One implementation of a fused op.

    ``min_opset`` is the ONNX (default domain) opset its nodes need: the model
    must already import it — onnxopt never converts a model's opset to make a
    kernel legal. ``opsets`` are the other domains its nodes use (``{"com.microsoft":
    1}``); stage 6 adds them to the model's imports. ``cpu_dtypes`` narrows
    ``dtypes`` on the CPU provider where ORT registers fewer types there. ``cost``
    is the prior relative to the decomposition (1.0) when neither the cost model
    nor tuning knows better. ``layout`` is the layout its emitted nodes read
    attention's Q in and write O in: ``BNSH`` as the fused op, or ``BSH``
    (``[B, S, H*D]``), for which select reads through the model's own head split
    and merge (select/layout.py) — layout is decided here, once, per kernel.
    ``requires`` checks what is specific to the op (layouts, mask shapes, attribute
    values) and returns a :class:`Refusal` or None. ``probabilities``: the kernel can write
    attention's P output (the decomposition computes P whole; a streaming kernel or an
    ONNX Runtime op does not), so it may bind a node whose P the model also reads.
    """

    name: str
    implements: str
    backend: Backend
    emit: Emit
    dtypes: frozenset[str] = ALL_FLOATS
    cpu_dtypes: frozenset[str] | None = None
    providers: frozenset[str] = BOTH_PROVIDERS
    min_opset: int = 0
    opsets: Mapping[str, int] = field(default_factory=dict, hash=False)
    min_ort: tuple[int, int] = (0, 0)
    min_compute_capability: tuple[int, int] = (0, 0)
    head_dims: frozenset[int] | None = None
    causal: bool = True
    grouped_query: bool = True
    deterministic: bool = True
    probabilities: bool = False
    cost: float = 1.0
    # Branches on the sequence length at run time from this many positions (0: never);
    # ``--tune`` then times every candidate at a longer sequence too.
    switch_seq: int = 0
    layout: Layout = Layout.BNSH
    requires: Requires | None = field(default=None, compare=False)
    notes: str = ""
    # Where the kernel does not compute the fused op's function for every input the model can
    # be given: the case, in words. The report names it wherever the kernel is chosen (issue
    # 28: a binding is exact for every value an input can hold, or the report says so).
    assumes: str = ""

    def __post_init__(self) -> None:
        # "ort" and Backend.ORT are one value; the record holds the enum either way.
        object.__setattr__(self, "backend", Backend(self.backend))
        object.__setattr__(self, "layout", Layout(self.layout))

    def rejects(self, node: Node, target: Target, *, model_opset: int | None = None,
                attrs: FusedAttrs | None = None) -> Refusal | None:
        """The first capability this kernel lacks for ``node`` on ``target``, or None.

        ``model_opset`` is the ONNX opset the model imports (None: only the target's
        ``opset`` bounds it); ``attrs`` is the node's attribute record (read here when not
        given).
        """
        if target.provider not in self.providers:
            return refusal("provider_not_supported",
                           f"runs only on {provider_names(self.providers)}")
        x = node.inputs[0] if node.inputs and node.inputs[0] is not None else None
        dtype, subject = (x.dtype, x.name) if x is not None else (None, "")
        if dtype not in self.dtypes:
            return refusal("dtype_not_supported", f"does not support dtype {dtype}", subject)
        if (self.cpu_dtypes is not None and target.provider == "CPUExecutionProvider"
                and dtype not in self.cpu_dtypes):
            return refusal("dtype_not_on_cpu", f"has no {dtype} implementation on CPU (only "
                           f"{', '.join(sorted(self.cpu_dtypes))})", subject)
        if (reason := self._platform_refusal(target, model_opset)) is not None:
            return reason
        attrs = attributes_of(node) if attrs is None else attrs
        if isinstance(attrs, AttentionAttrs) and (reason := self._attention_refusal(attrs)):
            return reason
        if isinstance(attrs, AttentionAttrs) and not self.probabilities and \
                reads_probabilities(node):
            p = node.outputs[1]
            return refusal("probabilities_not_output", f"does not output the attention "
                           f"probabilities, which the model also reads (%{p.name})", p.name)
        if not self.deterministic and target.determinism == "strict":
            return refusal("not_deterministic", "is not deterministic and determinism is strict")
        if self.backend != Backend.DECOMPOSE and (empty := _empty_input(node)) is not None:
            # (ORT 1.31's Attention fails on a zero batch, "Batch size must be greater than
            # 0", where the standard ops the decomposition uses compute the empty result)
            return refusal("empty_input", f"%{empty.name} is empty (a dim of size 0); only the "
                           "decomposition takes it", empty.name)
        if self.requires is not None:
            return self.requires(node, attrs, target)
        return None

    def _platform_refusal(self, target: Target, model_opset: int | None) -> Refusal | None:
        """Opsets, ONNX Runtime version, compute capability."""
        if model_opset is not None and model_opset < self.min_opset:
            return refusal("model_opset_too_old", f"needs opset {self.min_opset}; the model "
                           f"imports opset {model_opset}")
        if target.opset < self.min_opset:
            return refusal("target_opset_too_old", f"needs opset {self.min_opset}; the target "
                           f"allows opset {target.opset}")
        if target.ort_version < self.min_ort:
            return refusal("ort_too_old", f"needs ONNX Runtime {self.min_ort[0]}."
                           f"{self.min_ort[1]}, target is {target.ort_version[0]}."
                           f"{target.ort_version[1]}")
        if (self.min_compute_capability > (0, 0)
                and target.compute_capability < self.min_compute_capability):
            cc = self.min_compute_capability
            return refusal("compute_capability_too_low",
                           f"needs compute capability {cc[0]}.{cc[1]}")
        return None

    def _attention_refusal(self, attrs: AttentionAttrs) -> Refusal | None:
        """Head sizes, causal masking, grouped-query heads."""
        if self.head_dims is not None and attrs.head_size not in self.head_dims:
            return refusal("head_size_not_supported",
                           f"head size {attrs.head_size} not in {sorted(self.head_dims)}")
        if not self.causal and attrs.causal:
            return refusal("causal_not_supported", "does not support causal masking")
        if not self.grouped_query and attrs.grouped_query:
            return refusal("grouped_query_not_supported",
                           "does not support grouped-query attention")
        return None

    def to_json(self) -> dict:
        return {
            "name": self.name, "implements": self.implements, "backend": str(self.backend),
            "dtypes": sorted(self.dtypes),
            "cpu_dtypes": sorted(self.cpu_dtypes) if self.cpu_dtypes is not None else None,
            "providers": sorted(self.providers),
            "min_opset": self.min_opset, "opsets": dict(sorted(self.opsets.items())),
            "min_ort": ".".join(map(str, self.min_ort)),
            "min_compute_capability": ".".join(map(str, self.min_compute_capability)),
            "head_dims": sorted(self.head_dims) if self.head_dims else None,
            "causal": self.causal, "grouped_query": self.grouped_query,
            "deterministic": self.deterministic, "probabilities": self.probabilities,
            "cost": self.cost,
            "switch_seq": self.switch_seq, "layout": str(self.layout), "notes": self.notes,
        }


def _empty_input(node: Node):
    """An input whose shape has a dim known to be 0, if any."""
    for v in node.inputs:
        if v is not None and v.shape is not None and any(
                isinstance(d, int) and d == 0 for d in v.shape):
            return v
    return None
