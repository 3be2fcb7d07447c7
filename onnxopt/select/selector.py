"""Selection as a pure function: (fused node, target, registry) → choice and rejections."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.ops import attributes_of
from onnxopt.refusal import Refusal, refusal
from onnxopt.select.kernel import Kernel


@dataclass
class Selection:
    """The kernel chosen for one fused node and why every other one was not.

    ``costs`` holds what ranked the legal kernels (``unit``: ``"ms"`` when tuned,
    ``"x"`` — relative to the decomposition — from the cost model); ``basis`` says
    which: ``"tuned"``, ``"cost model"`` or ``"only legal kernel"``. ``rejected`` holds every
    other kernel with why: a missing capability, or the cost that ranked it lower.
    """

    node: str
    op: str
    chosen: Kernel
    rejected: list[tuple[Kernel, Refusal]]
    costs: dict[str, float] = field(default_factory=dict)
    unit: str = "x"
    basis: str = "cost model"
    signature: str = ""
    rule: str = ""  # the fusion rule that made the node (``explain --rule`` keeps its own)
    # The workload's regimes (``Regime.label``) and the kernel chosen for each; ``switch``
    # says how the node picks between two of them at run time (``queries <= 1: KERNEL``),
    # empty where one kernel serves every regime.
    regimes: dict[str, str] = field(default_factory=dict)
    switch: str = ""
    also: Kernel | None = None  # the other kernel of a switch (bound for few queries)
    # Where the regimes disagree and the node is not switched all the same: why (typed).
    no_switch: Refusal | None = None

    def to_json(self) -> dict:
        data = {"node": self.node, "op": self.op, "chosen": self.chosen.name,
                "basis": self.basis, "costs": {k: round(v, 4) for k, v in self.costs.items()},
                "unit": self.unit,
                "rejected": {k.name: str(reason) for k, reason in self.rejected}}
        if self.regimes:
            data["regimes"] = dict(self.regimes)
        if self.switch:
            data["switch"] = self.switch
        if self.no_switch is not None:
            data["no_switch"] = self.no_switch.to_json()
        return data


def legal_kernels(node: Node, target: Target, registry: list[Kernel], *,
                  model_opset: int | None = None
                  ) -> tuple[list[Kernel], list[tuple[Kernel, Refusal]]]:
    """(legal kernels, [(kernel, reason)] for the others) among those implementing the node."""
    legal: list[Kernel] = []
    rejected: list[tuple[Kernel, Refusal]] = []
    attrs = None
    for k in registry:
        if k.implements != node.op_type:
            continue
        attrs = attributes_of(node) if attrs is None else attrs
        reason = k.rejects(node, target, model_opset=model_opset, attrs=attrs)
        if reason:
            rejected.append((k, reason))
        else:
            legal.append(k)
    return legal, rejected


def _describe(value: float, unit: str) -> str:
    return f"{value:.3g} ms" if unit == "ms" else f"{value:.2f}x the decomposition"


def select_kernel(node: Node, target: Target, registry: list[Kernel],
                  costs: Mapping[str, float] | None = None, *, model_opset: int | None = None,
                  unit: str = "x", basis: str = "cost model",
                  failed: Mapping[str, str] | None = None,
                  tolerance: float = 0.0, prior: Mapping[str, float] | None = None) -> Selection:
    """Pick the cheapest kernel whose capabilities cover the node; ties break by name.

    ``costs`` ranks the legal kernels (a kernel missing from it ranks by its prior
    ``Kernel.cost``); ``failed`` maps kernels that could not be measured to the
    error, and rejects them with it. With a ``tolerance`` (measured times), kernels
    within that fraction of the fastest are a tie, broken by ``prior`` (the cost
    model), then by name: a 0.4% difference between two timings is noise, and the
    decision should not flip with it.
    """
    legal, rejected = legal_kernels(node, target, registry, model_opset=model_opset)
    failed = failed or {}
    for k in [k for k in legal if k.name in failed]:
        legal.remove(k)
        rejected.append((k, refusal("failed_in_ort", f"failed in ONNX Runtime: {failed[k.name]}")))
    if not legal:
        raise LookupError(f"{node.name}: no legal kernel implements {node.op_type}")
    score = {k.name: float(costs[k.name]) if costs and k.name in costs else k.cost for k in legal}
    legal.sort(key=lambda k: (score[k.name], k.name))
    chosen = legal[0]
    tied: set[str] = set()
    if tolerance > 0:
        tied = {k.name for k in legal if score[k.name] <= score[chosen.name] * (1 + tolerance)}
        rank = prior or {}
        chosen = min((k for k in legal if k.name in tied),
                     key=lambda k: (rank.get(k.name, k.cost), k.name))
        legal.remove(chosen)
        legal.insert(0, chosen)
    if len(legal) == 1:
        basis = "only legal kernel"
    best = _describe(score[chosen.name], unit)
    what = "measured" if unit == "ms" else "estimated"
    for k in legal[1:]:
        reason = f"{what} {_describe(score[k.name], unit)}; {chosen.name} {best}"
        code = f"{what}_slower"
        if k.name in tied:
            code = "tie_lost_on_cost_model"
            reason += (f" (within {tolerance:.0%}: a tie, decided by the cost model, "
                       f"{(prior or {}).get(k.name, k.cost):.2f}x against "
                       f"{(prior or {}).get(chosen.name, chosen.cost):.2f}x)")
        rejected.append((k, refusal(code, reason)))
    return Selection(node.name, node.op_type, chosen, rejected, costs=score, unit=unit,
                     basis=basis)
