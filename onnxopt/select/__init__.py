"""Stage 6: bind every fused op to the best legal kernel and emit its final form.

For each ``ai.onnxopt`` node: the registry's kernels for its op are checked
against the node and the target (``requirements ⊆ capabilities``; the first
missing capability is the rejection reason), the legal ones are ranked — by the
cost model, or with ``--tune`` by timing them on this machine (cached) — and the
winner's emitted nodes replace the fused node. The decomposition is always
legal, so a model with nothing better still runs everywhere.
"""

from __future__ import annotations

from onnxopt.ir.builder import FUSED_DOMAIN
from onnxopt.ir.model import Model
from onnxopt.legality.target import Target
from onnxopt.options import OptimizeOptions
from onnxopt.runtime.ort_module import ort
from onnxopt.select import cost_model, tuning
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

    def chosen_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.selections:
            out[s.chosen.name] = out.get(s.chosen.name, 0) + 1
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
        if self.tune_cache:
            data["tuning"] = {"cache": self.tune_cache, "signatures_timed": self.tuned}
        return data


def run(model: Model, options: OptimizeOptions, target: Target, *,
        registry: list[Kernel] | None = None) -> SelectReport | None:
    """The select stage, for the run's target (:func:`onnxopt.legality.target.run_target`)."""
    registry = default_registry() if registry is None else registry
    binding = Binding.for_model(model)
    tuner = _Tuner(model, options, target, binding) if options.tune or options.tune_cache else None
    report = SelectReport()
    fused = [n for n in model.graph.all_nodes() if n.domain == FUSED_DOMAIN]
    for node in fused:
        legal, _ = legal_kernels(node, target, registry, model_opset=model.opset)
        if not legal:
            selection = _fallback(node, target, registry, model.opset)
        elif tuner is not None and len(legal) > 1 and (timed := tuner.times(node, legal)):
            timings, failed, sig = timed
            untuned = select_kernel(node, target, registry,
                                    cost_model.estimates(legal, node, target, binding),
                                    model_opset=model.opset, failed=failed)
            selection = tuning.tuned_selection(untuned, legal, timings)
            selection.signature = sig
        else:
            selection = None
        if selection is None:
            costs = cost_model.estimates(legal, node, target, binding)
            selection = select_kernel(node, target, registry, costs, model_opset=model.opset)
        selection.rule = node.created_by
        report.selections.append(selection)
        bind(model, node, selection.chosen, target)
    if tuner is not None:
        tuner.cache.save()
        report.tuned, report.tune_cache = tuner.timed, tuner.cache.path
    return report if report.selections else None


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

    def __init__(self, model: Model, options: OptimizeOptions, target: Target,
                 binding: Binding) -> None:


        self.model, self.target, self.binding = model, target, binding
        self.cache = tuning.TuningCache(options.tune_cache)
        self.ort_version = ort.__version__
        self.timed = 0
        self.measure_missing = options.tune  # a cache alone is read, never extended

    def times(self, node, legal: list[Kernel]):
        """(timings by kernel, failures, signature) for ``legal``, or None if it cannot be
        tuned."""

        sig = tuning.signature(node, self.binding)
        if sig is None:
            return None
        switch = max(k.switch_seq for k in legal)
        long_seq = max(2 * switch, self.binding.default) if switch else 0
        if long_seq:  # a kernel that changes its plan with the length is timed on both sides
            sig = f"{sig}|and seq {long_seq}"
        key = tuning.cache_key(sig, self.target, self.ort_version)
        entry = self.cache.get(key) or {"times_ms": {}, "failed": {}}
        missing = [k for k in legal if k.name not in entry["times_ms"]
                   and k.name not in entry["failed"]]
        if missing and not self.measure_missing:
            return None
        if missing:
            # Time the whole candidate set together (interleaved), so numbers are comparable.
            times, failed = tuning.measure(self.model, node, legal, self.target, self.binding)
            if times and long_seq:
                times, failed = _both_lengths(times, failed, *tuning.measure(
                    self.model, node, legal, self.target,
                    Binding.for_model(self.model, seq=long_seq)))
            if not times:  # the provider is not on this machine, or nothing ran: no decision
                return None
            self.cache.put(key, times, failed, runs=len(times))
            self.timed += 1
            entry = self.cache.get(key)
        names = {k.name for k in legal}
        timings = {k: t for k, t in self.cache.timings(key).items() if k in names}
        failed = {k: v for k, v in entry["failed"].items() if k in names}
        return timings, failed, sig
