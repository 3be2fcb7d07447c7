"""Stage 6: bind every fused op to the best legal kernel and emit its final form.

For each ``ai.onnxopt`` node: the registry's kernels for its op are checked
against the node and the target (``requirements ⊆ capabilities``; the first
missing capability is the rejection reason), the legal ones are ranked — by the
cost model, or with ``--tune`` by timing them on this machine (cached) — and the
winner's emitted nodes replace the fused node. The decomposition is always
legal, so a model with nothing better still runs everywhere.
"""

from __future__ import annotations

import dataclasses
import math

from onnxopt.ir.builder import FUSED_DOMAIN
from onnxopt.ir.model import Model
from onnxopt.legality.target import Target
from onnxopt.options import OptimizeOptions
from onnxopt.refusal import Refusal, refusal
from onnxopt.runtime.ort_module import ort
from onnxopt.select import cost_model, regime_switch, tuning, workload
from onnxopt.select.bind import bind
from onnxopt.select.decompose import decomposition_kernels
from onnxopt.select.kernel import Kernel
from onnxopt.select.registry import default_registry
from onnxopt.select.selector import Selection, legal_kernels, select_kernel
from onnxopt.select.shapes import Binding


class SelectReport:
    def __init__(self) -> None:
        self.selections: list[Selection] = []
        self.tuned: int = 0  # signatures timed in this run (the rest came from the cache)
        self.tune_cache: str | None = None
        self.regimes: list[workload.Regime] = []  # the shapes the kernels were ranked at
        # With --tune: per regime label, the signatures (op, attributes, input shapes at that
        # regime's sizes) whose decisions were timed or read from the cache.
        self.tuned_shapes: dict[str, list[str]] = {}

    def chosen_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.selections:
            for kernel in (s.chosen, s.also):
                if kernel is not None:
                    out[kernel.name] = out.get(kernel.name, 0) + 1
        return out

    def runtime_libraries(self) -> list[str]:
        """The native libraries the output needs to run (a chosen kernel's runtime_library)."""
        return sorted({lib for s in self.selections
                       if (lib := getattr(s.chosen, "runtime_library", None))})

    def assumptions(self) -> dict[str, str]:
        """What each chosen kernel that is not exact for every input assumes, by kernel."""
        return {s.chosen.name: s.chosen.assumes for s in self.selections if s.chosen.assumes}

    def to_json(self) -> dict:
        data = {"chosen": self.chosen_counts(), "nodes": [s.to_json() for s in self.selections]}
        if self.runtime_libraries():
            data["runtime_libraries"] = self.runtime_libraries()
        if self.assumptions():
            data["assumptions"] = dict(sorted(self.assumptions().items()))
        if self.regimes:
            data["workload"] = [r.to_json() for r in self.regimes]
        if self.tune_cache:
            data["tuning"] = {"cache": self.tune_cache, "signatures_timed": self.tuned,
                              "shapes": self.tuned_shapes}
        return data


def run(model: Model, options: OptimizeOptions, target: Target, *,
        registry: list[Kernel] | None = None) -> SelectReport | None:
    """The select stage, for the run's target (:func:`onnxopt.legality.target.run_target`).

    Each fused node is ranked in every regime of the workload (:mod:`.workload`: a prefill,
    and a decode step where the model has a key/value cache, or what the options state);
    where the regimes' best kernels differ the node is bound to both, switched on its query
    length (:mod:`.regime_switch`)."""
    registry = default_registry() if registry is None else registry
    fused = [n for n in model.graph.all_nodes() if n.domain == FUSED_DOMAIN]
    queries = workload.query_symbols(fused)
    regimes = workload.workload(model, [workload.parse_regime(t) for t in options.workload],
                                options.shapes, queries)
    bindings = [(r, workload.binding(model, r, queries)) for r in regimes]
    tuner = _Tuner(model, options, target) if options.tune or options.tune_cache else None
    report = SelectReport()
    report.regimes = list(regimes)
    for node in fused:
        legal, _ = legal_kernels(node, target, registry, model_opset=model.opset)
        if not legal:
            selection = _fallback(node, target, registry, model.opset)
            per_regime = [(regimes[0], selection)]
        else:
            per_regime = [(r, _select_in(node, legal, target, registry, model, b, r, tuner))
                          for r, b in bindings]
        selection = _bind_for_regimes(model, node, per_regime, target)
        selection.rule = node.created_by
        report.selections.append(selection)
    if tuner is not None:
        tuner.cache.save()
        report.tuned, report.tune_cache = tuner.timed, tuner.cache.path
        report.tuned_shapes = tuner.shapes
    return report if report.selections else None


def _select_in(node, legal: list[Kernel], target: Target, registry: list[Kernel], model: Model,
               binding: Binding, regime: workload.Regime, tuner) -> Selection:
    """The selection for one regime: tuned where ``tuner`` times it, else the cost model's."""
    costs = cost_model.estimates(legal, node, target, binding)
    if tuner is not None and len(legal) > 1 and (
            timed := tuner.times(node, legal, binding, regime)):
        timings, failed, sig, confirming = timed
        untuned = select_kernel(node, target, registry, costs, model_opset=model.opset,
                                failed=failed)
        selection = tuning.tuned_selection(untuned, legal, timings, confirming)
        selection.signature = sig
        return selection
    return select_kernel(node, target, registry, costs, model_opset=model.opset)


def _bind_for_regimes(model: Model, node, per_regime: list, target: Target) -> Selection:
    """Bind ``node`` to the kernel its regimes agree on; where the fewest-query and the
    most-query regimes disagree, to both, switched on the query length (the largest query
    count of a regime that wants the few-query kernel is the threshold) — where that switch
    costs less over the regimes than the best single kernel (:func:`_switched_cost`: the If is
    not free in a decode step). Otherwise the kernel whose costs over all regimes are least
    (geometric mean), and the report says why there is no switch."""
    chosen = {r.label: s.chosen.name for r, s in per_regime}
    by_seq = sorted(per_regime, key=lambda rs: rs[0].seq)
    few, many = by_seq[0][1], by_seq[-1][1]
    selection = many if few.chosen.name != many.chosen.name else per_regime[0][1]
    if len(per_regime) > 1:
        selection.regimes = chosen
    if few.chosen.name == many.chosen.name:
        bind(model, node, selection.chosen, target)
        return selection
    fewest_many = min(r.seq for r, s in per_regime if s.chosen.name == many.chosen.name)
    threshold = max((r.seq for r, s in per_regime
                     if s.chosen.name == few.chosen.name and r.seq < fewest_many), default=None)
    single = min((s for _, s in per_regime), key=lambda s: _overall(s.chosen.name, per_regime))
    no_switch = None
    pair = None
    if threshold is not None:
        # The few-query regime's best kernel, or where it cannot share an If with the
        # many-query one (a packed-layout kernel, or one that takes over the key/value cache)
        # its next best that can.
        pair = few.chosen if regime_switch.can_switch(node, few.chosen, many.chosen,
                                                       model.opset) \
            else _switchable_few(node, few, many, model.opset)
    if pair is not None:
        switched = _switched_cost(pair, many.chosen, per_regime, threshold, target)
        alone = _overall(single.chosen.name, per_regime)
        if switched < alone:
            regime_switch.bind_by_queries(model, node, pair, many.chosen, target, threshold)
            many.also = pair
            many.switch = f"queries <= {threshold}: {pair.name}; more: {many.chosen.name}"
            many.regimes = {**chosen, **{r.label: pair.name for r, s in per_regime
                                         if r.seq <= threshold}}
            return many
        no_switch = _no_switch_reason(pair, many.chosen, single.chosen, per_regime, threshold,
                                      switched, alone)
    selection = single
    # Each regime runs the one kernel; the regimes' own favourites are in ``no_switch``'s text
    # where a switch was weighed.
    selection.regimes = {label: single.chosen.name for label in chosen}
    selection.no_switch = no_switch
    bind(model, node, selection.chosen, target)
    return selection


def _switchable_few(node, few: Selection, many: Selection, opset: int) -> Kernel | None:
    """The cheapest legal kernel of the few-query regime that can be switched with the
    many-query regime's kernel (None where none can)."""
    legal = {k.name: k for k in [few.chosen, *(k for k, _ in few.rejected)] if k.name in few.costs}
    for name in sorted(legal, key=lambda n: (few.costs[n], n)):
        if name != many.chosen.name and regime_switch.can_switch(node, legal[name], many.chosen,
                                                                 opset):
            return legal[name]
    return None


def _switched_cost(few: Kernel, many: Kernel, per_regime: list, threshold: int,
                   target: Target) -> float:
    """What ``If(queries <= threshold, few, many)`` costs, as :func:`_overall` counts (log of
    the cost relative to each regime's best, summed over the regimes).

    Two things the per-regime ranking does not see. The If: in a regime at or below the
    threshold (a decode step) it adds :func:`cost_model.switch_cost` of the few-query kernel.
    And the many-query kernel's gain at the regime's own query count: a kernel that changes
    its plan only from ``switch_seq`` queries (causal blocks) runs its short form below that
    — no blocks, the lean decomposition in a Loop of one — so in a regime of fewer queries
    the switch buys nothing over the few-query kernel (the cost model's entry for the kernel
    averages prompt lengths, 512 among them; a switch is paid in every decode step, so it is
    made for the prompts the workload states)."""
    total = 0.0
    for regime, s in per_regime:
        best = min(s.costs.values(), default=1.0) or 1.0
        if regime.seq <= threshold:
            cost = s.costs.get(few.name, float("inf")) * (1.0 + cost_model.switch_cost(target))
        elif many.switch_seq and regime.seq < many.switch_seq:
            cost = max(s.costs.get(many.name, float("inf")), s.costs.get(few.name, 0.0))
        else:
            cost = s.costs.get(many.name, float("inf"))
        total += math.log(max(cost, 1e-12) / best)
    return total


def _no_switch_reason(few: Kernel, many: Kernel, single: Kernel, per_regime: list,
                      threshold: int, switched: float, alone: float) -> Refusal:
    """Why the node is not switched by query length although its regimes disagree."""
    short = [r.label for r, _ in per_regime
             if threshold < r.seq and many.switch_seq and r.seq < many.switch_seq]
    text = (f"queries <= {threshold}: {few.name}; more: {many.name} estimated "
            f"{math.exp(switched):.2f}x the regimes' best kernels (product over the regimes, the If "
            f"included) against {math.exp(alone):.2f}x for {single.name} alone")
    if short:
        text += (f"; {many.name} runs no blocks below {many.switch_seq} queries "
                 f"({', '.join(short)})")
    return refusal("switch_costs_more", text)


def _overall(kernel: str, per_regime: list) -> float:
    """A kernel's geometric-mean cost over the regimes (relative to each regime's best)."""
    total = 0.0
    for _, s in per_regime:
        best = min(s.costs.values(), default=1.0) or 1.0
        total += math.log(max(s.costs.get(kernel, float("inf")), 1e-12) / best)
    return total


def _both_lengths(short: dict[str, tuning.Timing], short_failed: dict[str, str],
                  long: dict[str, tuning.Timing], long_failed: dict[str, str]):
    """The geometric mean of a kernel's timings at the two lengths; failing at either fails."""
    failed = {**long_failed, **short_failed}
    timings = {k: short[k].combined(long[k]) for k in short if k in long and k not in failed}
    return timings, failed


def _fallback(node, target: Target, registry: list[Kernel], model_opset: int) -> Selection:
    """Nothing legal (a registry without this op's decomposition): use the decomposition."""

    decomposition = next(k for k in decomposition_kernels() if k.name == f"decompose.{node.op_type}")
    _, rejected = legal_kernels(node, target, registry, model_opset=model_opset)
    return Selection(node.name, node.op_type, decomposition, rejected, basis="fallback")


class _Tuner:
    """Times the legal kernels of each distinct signature once per run, through the cache."""

    def __init__(self, model: Model, options: OptimizeOptions, target: Target) -> None:
        self.model, self.target = model, target
        self.cache = tuning.TuningCache(options.tune_cache)
        self.ort_version = ort.__version__
        self.timed = 0
        self.measure_missing = options.tune  # a cache alone is read, never extended
        self.shapes: dict[str, list[str]] = {}  # regime label -> signatures it decided

    def times(self, node, legal: list[Kernel], binding: Binding, regime: workload.Regime):
        """(timings by kernel, failures, signature) for ``legal`` at ``binding`` (the sizes of
        ``regime``), or None if it cannot be tuned."""

        sig = tuning.signature(node, binding)
        if sig is None:
            return None
        switch = max(k.switch_seq for k in legal)
        queries = binding.shape(node.inputs[0].shape) if node.inputs else None
        if queries and len(queries) >= 2 and queries[-2] < switch // 2:
            switch = 0  # a decode step: no run of this regime reaches the kernel's switch
        long_seq = max(2 * switch, binding.default) if switch else 0
        if long_seq:  # a kernel that changes its plan with the length is timed on both sides
            sig = f"{sig}|and seq {long_seq}"
        key = tuning.cache_key(sig, self.target, self.ort_version)
        entry = self.cache.get(key) or {"times_ms": {}, "failed": {}}
        missing = [k for k in legal if k.name not in entry["times_ms"]
                   and k.name not in entry["failed"]]
        if missing and not self.measure_missing:
            return None
        if missing:
            times, failed = self._measure(node, legal, binding, regime, long_seq)
            if not times:  # the provider is not on this machine, or nothing ran: no decision
                return None
            # A second, independent measurement that a tuned choice must agree with
            # (tuning.tuned_selection).
            confirming, failed_again = self._measure(node, legal, binding, regime, long_seq)
            failed = {**failed, **failed_again}
            self.cache.put(key, times, failed, runs=len(times), confirming=confirming)
            self.timed += 1
            entry = self.cache.get(key)
        names = {k.name for k in legal}
        decided = self.shapes.setdefault(regime.label, [])
        if sig not in decided:
            decided.append(sig)
        timings = {k: t for k, t in self.cache.timings(key).items() if k in names}
        failed = {k: v for k, v in entry["failed"].items() if k in names}
        confirming = {k: t for k, t in self.cache.confirming(key).items() if k in timings}
        return timings, failed, sig, confirming

    def _measure(self, node, legal: list[Kernel], binding: Binding, regime: workload.Regime,
                 long_seq: int):
        """One measurement of the whole candidate set together (interleaved, so the numbers
        are comparable), at ``long_seq`` too where a kernel changes its plan there."""
        times, failed = tuning.measure(self.model, node, legal, self.target, binding)
        if times and long_seq:
            longer = workload.binding(self.model, dataclasses.replace(regime, seq=long_seq),
                                      workload.query_symbols([node]))
            times, failed = _both_lengths(times, failed, *tuning.measure(
                self.model, node, legal, self.target, longer))
        return times, failed
