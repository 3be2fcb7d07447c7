"""Representative sizes for symbolic dimensions, shared by the cost model and tuning.

A fused node's shapes usually hold symbols (``batch``, ``seq``, products such as
``8*batch``, sums such as a cache's ``(past_seq+seq)`` keys). Ranking needs numbers: a
symbol that is the first dimension of a graph input stands for the batch (1 by default),
any other for the sequence (128 by default) — the sizes a CPU inference serves most.
Selection ranks at the sizes of each regime of the model's workload
(:mod:`onnxopt.select.workload`: a prefill, a decode step against a cache, or what the user
states), whose bindings it builds there.
"""

from __future__ import annotations

from collections.abc import Mapping

from onnxopt.ir import symdim as sd
from onnxopt.ir.model import Model

DEFAULT_BATCH = 1
DEFAULT_SEQ = 128


class Binding:
    """Symbol → representative size."""

    def __init__(self, sizes: Mapping[str, int], default: int = DEFAULT_SEQ) -> None:
        self.sizes = dict(sizes)
        self.default = default

    @classmethod
    def for_model(cls, model: Model, batch: int = DEFAULT_BATCH, seq: int = DEFAULT_SEQ) -> Binding:
        sizes: dict[str, int] = {}
        for value in model.graph.inputs:
            for i, d in enumerate(value.shape or ()):
                if isinstance(d, str) and "*" not in d and d not in sizes:
                    sizes[d] = batch if i == 0 else seq
        return cls(sizes, seq)

    def dim(self, d) -> int | None:
        """The size ``d`` stands for: a product of symbols or a sum of such (a cache's
        ``past + seq`` keys); None where it is unknown."""
        if isinstance(d, int):
            return d
        d = sd.clean(d)
        if d is None:
            return None
        try:
            return sd.evaluate(d, self.sizes, self.default)
        except (TypeError, ValueError):
            return None

    def shape(self, shape) -> tuple[int, ...] | None:
        if shape is None:
            return None
        dims = tuple(self.dim(d) for d in shape)
        return None if any(d is None for d in dims) else dims
