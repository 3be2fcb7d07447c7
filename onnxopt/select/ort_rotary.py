"""RotaryFused on ONNX Runtime's rotary operators — listed, and why they are not used.

Both ``com.microsoft.RotaryEmbedding`` and ONNX ``RotaryEmbedding`` (opset 23)
read cos/sin caches of half the rotary width, one value per frequency
(``[max_position, d/2]`` indexed by position ids, or ``[B, S, d/2]``), and
rebuild the full width by repeating them. ``RotaryFused`` carries the
full-width cos/sin tensors the model computed (``[1, 1, S, d]`` in LLaMA);
they equal a repeated half only when the model built them as
``concat(freqs, freqs)``, which onnxopt does not prove. The decomposition is
the only legal kernel until a rule records that proof on the node.
"""

from __future__ import annotations

from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.ops import RotaryAttrs
from onnxopt.refusal import Refusal, refusal
from onnxopt.select.kernel import BOTH_PROVIDERS, MS_DOMAIN, Backend, Kernel

_HALVES = ("reads half-width cos/sin caches (one value per frequency); the node's full-width "
           "cos/sin are not proved to be two equal halves")


def _contrib_requires(node: Node, attrs: RotaryAttrs, target: Target) -> Refusal | None:
    return refusal("half_width_caches",
                   "needs position ids and caches indexed by position; " + _HALVES)


def _onnx23_requires(node: Node, attrs: RotaryAttrs, target: Target) -> Refusal | None:
    return refusal("half_width_caches", _HALVES)


def _never(b, node, attrs, target):  # pragma: no cover - never legal, so never emitted
    raise AssertionError("this kernel is never selected")


def kernels() -> list[Kernel]:
    return [
        Kernel(name="ort.RotaryEmbedding", implements="RotaryFused", backend=Backend.ORT,
               emit=_never,
               dtypes=frozenset({"float32", "float16"}), providers=BOTH_PROVIDERS,
               opsets={MS_DOMAIN: 1}, requires=_contrib_requires, notes="com.microsoft"),
        Kernel(name="onnx.RotaryEmbedding-23", implements="RotaryFused", backend=Backend.ORT,
               emit=_never, dtypes=frozenset({"float32", "float16"}), providers=BOTH_PROVIDERS,
               min_opset=23, min_ort=(1, 23), requires=_onnx23_requires, notes="ONNX"),
    ]
