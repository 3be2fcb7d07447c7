"""The driver: the six stages run in order, one direction, each timed.

    import → normalize → fuse (match, legality, rewrite) → select → export

Each stage is a function of the IR it receives (and, for fuse and select, of
the run's one target, which the driver builds); no stage calls an earlier one.
The driver collects what the report shows: node counts by op before and after,
seconds per stage, and what each stage has to say (fusions, refusals, kernel
choices).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from onnx import ModelProto

from onnxopt import fuse, normalize, ort_helper, select
from onnxopt.errors import OnnxoptError
from onnxopt.exporter.build import export_model_encoded
from onnxopt.exporter.save import StagedFile, restore_left_out
from onnxopt.fuse import FusionReport, MatchStatus
from onnxopt.importer import import_model
from onnxopt.ir.builder import FUSED_DOMAIN
from onnxopt.ir.exactness import ExactnessPolicy, rewrite_of, unconfined_sites
from onnxopt.ir.model import Model
from onnxopt.ir.node import STANDARD_DOMAINS
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.verifier import verify_graph
from onnxopt.legality.target import Target, run_target
from onnxopt.options import OptimizeOptions
from onnxopt.rewrite.driver import PassResult, run_to_fixed_point
from onnxopt.select import SelectReport

Progress = Callable[[str], None]


class StageFailure(Exception):
    """A stage after import raised: a bug of onnxopt's, on a model it imported fine. The
    safeguard (:mod:`onnxopt.safeguard`) answers it by holding back what it can."""

    def __init__(self, stage: str, error: Exception) -> None:
        first = " ".join(str(error).split())[:200]
        super().__init__(f"internal error in stage {stage}: {type(error).__name__}: {first}")
        self.stage = stage
        self.error = error


@dataclass
class OptimizeReport:
    """What one run did; ``to_json()`` is what ``--json`` writes."""

    source: str
    nodes_before: Counter = field(default_factory=Counter)
    nodes_after: Counter = field(default_factory=Counter)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    stages: dict[str, Any] = field(default_factory=dict)
    options: OptimizeOptions | None = None  # what the run was asked, for the report to say
    # The run's one target, made when first asked (:func:`_target_once`): the report says what
    # it resolved, whether or not a stage needed it.
    target: Callable[[], Target] | None = None

    def to_json(self) -> dict[str, Any]:
        """The body of ``optimize --json`` (``$defs/optimize`` in onnxopt/report.schema.json,
        whose version the command adds): every key snake_case, the normalization passes'
        names too (``shape arithmetic`` is ``shape_arithmetic`` here)."""
        return {
            "source": self.source,
            **(_run_settings(self.options, self.target())
               if self.options is not None and self.target is not None else {}),
            "nodes_before": dict(sorted(self.nodes_before.items())),
            "nodes_after": dict(sorted(self.nodes_after.items())),
            "total_nodes_before": sum(self.nodes_before.values()),
            "total_nodes_after": sum(self.nodes_after.values()),
            "stage_seconds": {k: round(v, 6) for k, v in self.stage_seconds.items()},
            **{k: _snake_keys(v) if k in _PASS_COUNTS else _jsonable(v)
               for k, v in self.stages.items()},
        }


# The stages whose summary counts what each normalization pass changed, by the pass's name.
_PASS_COUNTS = ("normalize", "cleanup")


def _snake_keys(counts: dict[str, int]) -> dict[str, int]:
    return {"_".join(str(k).split()): v for k, v in counts.items()}


def _run_settings(options: OptimizeOptions, target: Target) -> dict[str, Any]:
    """The target the run resolved (``--target`` left open is the machine's) and every option
    as given, except the safeguard's own ``hold_back`` (the report's ``safeguard`` says what it
    held back)."""
    given = {}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if f.name == "hold_back":
            continue
        if f.name == "extra_rules":
            value = [rule.name for rule in value]
        elif isinstance(value, (set, frozenset)):
            value = sorted(value)
        given[f.name] = value
    return {
        "target": {"device": target.device, "provider": target.provider,
                   "compute_capability": "{}.{}".format(*target.compute_capability),
                   "ort_version": "{}.{}".format(*target.ort_version),
                   "determinism": target.determinism},
        "options": given,
    }


@dataclass
class OptimizeResult:
    model: Model
    proto: ModelProto
    external: dict[str, LazyTensor]
    report: OptimizeReport
    passthrough: bool = False  # the input itself, as it was (the safeguard's last resort)
    # ``proto``'s bytes, where the safeguard serialized it for its checks: written as they are,
    # and already staged beside the output where the safeguard was given it.
    serialized: bytes | None = None
    staged: StagedFile | None = None
    # Main-graph initializers (by position in ``proto``) that are the input's own messages,
    # with their bytes in the input file: written as those bytes (exporter/serialize.py).
    encoded: dict[int, memoryview] = field(default_factory=dict)
    # Those of them written without their raw data (``run_pipeline(keep_left_out=True)``): by
    # position, the raw data ``proto`` lacks. Bytes written from ``encoded`` hold it; a caller
    # that hands ``proto`` itself on takes :meth:`whole_proto`.
    left_out: dict[int, memoryview] = field(default_factory=dict)

    def whole_proto(self) -> ModelProto:
        """``proto`` with every number of its own (raw data left out is put back: a copy)."""
        if self.left_out:
            restore_left_out(self.proto, self.left_out)
        return self.proto


def op_histogram(model: Model) -> Counter:
    return Counter(n.qualified_op for n in model.graph.all_nodes())


def proto_histogram(graph) -> Counter:
    """Ops of an exported graph (subgraphs included): what the user's file really holds."""
    counts: Counter = Counter()
    for node in graph.node:
        op = node.op_type if node.domain in STANDARD_DOMAINS else f"{node.domain}::{node.op_type}"
        counts[op] += 1
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                counts.update(proto_histogram(g))
    return counts


def run_pipeline(source: str | ModelProto, options: OptimizeOptions | None = None,
                 progress: Progress | None = None, *, keep_left_out: bool = False
                 ) -> OptimizeResult:
    """Optimize ``source`` (a path or ModelProto) and return the exported proto and a report.
    ``keep_left_out``: the caller writes the result from its encoded pieces and takes
    :meth:`OptimizeResult.whole_proto` where it needs the proto whole (the safeguard): the
    input's unchanged weights are then not copied into the result's proto."""
    options = options or OptimizeOptions()
    step = progress or (lambda _name: None)
    report = OptimizeReport(source=source if isinstance(source, str) else "<model>",
                            options=options)

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        step(name)
        start = time.perf_counter()
        result = fn()
        report.stage_seconds[name] = report.stage_seconds.get(name, 0.0) + time.perf_counter() - start
        return result

    # ONNX Runtime is loaded in a helper process of its own while the import runs
    # (onnxopt.ort_helper): the fuse stage's probes and facts, and the safeguard's
    # load check, are answered there; the parent does not load it.
    ort_helper.start()
    with _collector_spared() as imported:
        model = timed("import", lambda: import_model(source))
        imported()
        report.nodes_before = op_histogram(model)
        report.target = _target_once(options, model.opset)
        if options.debug:
            verify_graph(model.graph)
        model, (proto, external, encoded, left_out) = _run_stages(
            model, options, report.target, timed, report, keep_left_out,
            reimport=lambda: timed("import", lambda: import_model(source)))
    report.nodes_after = proto_histogram(proto.graph)
    return OptimizeResult(model, proto, external, report, encoded=encoded, left_out=left_out)


def _target_once(options: OptimizeOptions, model_opset: int) -> Callable[[], Target]:
    """The run's one target, built on the first call and the same one after (a reimport keeps
    the model's opset). Built when a stage first needs it, not at import: it asks the ORT
    helper for ORT's version, which import and the first normalization need not wait for."""
    return functools.cache(lambda: run_target(options, model_opset))


@contextlib.contextmanager
def _collector_spared():
    """Keep Python's cyclic garbage collector off the imported IR while the stages run.

    The IR (a few objects per node, all referring to each other) lives until the run ends, yet
    collections walked it again and again: on the 24-layer GPT-2 the collector took 0.10-0.13 s
    of a 1.1 s command, and the first collection after import alone took 0.5 s on a graph of
    104,000 nodes (import pauses the collector, so everything it made was still young). Here
    the collector is off during import, and what exists then is frozen (``gc.freeze``: left
    out of collections) before it is turned back on (the caller calls what this yields once
    the IR is built); what the stages make and drop is collected as before. Everything is
    handed back to the collector when the run ends, so a process that optimizes many models
    frees each one's cycles. Where the caller froze objects itself (or turned the collector
    off), nothing is changed: unfreezing would undo its freeze too."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield lambda: None
        return

    def imported() -> None:
        gc.freeze()
        gc.enable()

    gc.disable()
    try:
        yield imported
    finally:
        gc.enable()
        gc.unfreeze()


def _run_stages(model: Model, options: OptimizeOptions, target: Callable[[], Target],
                timed: Callable[[str, Callable], Any], report: OptimizeReport,
                keep_left_out: bool, reimport: Callable[[], Model]
                ) -> tuple[Model, tuple[ModelProto, dict[str, LazyTensor], dict[int, memoryview],
                                        dict[int, memoryview]]]:
    """The stages after import, then the export: the model the stages ended with, and what
    :func:`export_model_encoded` returns. ``target`` gives the run's one target."""
    if options.fuse:
        model = confined_fusion(model, options, target, timed, report, reimport)

        def select_stage(model: Model, options: OptimizeOptions) -> SelectReport | None:
            return select.run(model, options, target())

        later = [("select", select_stage),
                 # Emitted kernels bring layout conversions that may cancel against the model's
                 # own head split/merge; normalization runs again to clean up (exact rewrites
                 # only: what is not fused has had its chance, and what is fused is bound).
                 ("cleanup", _exact_normalize)]
        for name, stage in later:
            summary = _stage(name, timed, options, lambda stage=stage: stage(model, options))
            if summary is not None:
                report.stages[name] = summary
            if options.debug:
                verify_graph(model.graph)
    return model, _stage("export", timed, options,
                         lambda: export_model_encoded(model, keep_left_out=keep_left_out))


# How often fusion is run again from the imported model with more non-exact rewrites
# refused, before none at all is made (which is exact by construction).
CONFINE_RUNS = 3


def confined_fusion(model: Model, options: OptimizeOptions, target: Callable[[], Target],
                    timed: Callable[[str, Callable], Any], report: OptimizeReport,
                    reimport: Callable[[], Model]) -> Model:
    """Normalize and fuse so that every non-exact rewrite ends inside a fused region.

    Normalization makes its non-exact rewrites (a reciprocal for a division, a softmax
    recognised) wherever they apply, since only fusion shows which ones a fused region
    absorbs. Those whose effect reaches an output past every fused node changed the model
    where nothing was fused (:func:`onnxopt.ir.exactness.unconfined_sites`): the run starts
    again from a fresh import with them refused, until none is left. The rounds, and the
    rewrites refused, are in the report (``exactness``)."""
    policy = ExactnessPolicy(inexact=_may_be_inexact(options))
    rounds = 0

    def fuse_stage(model: Model, options: OptimizeOptions) -> FusionReport | None:
        return fuse_and_settle(model, options, target())

    while True:
        model.exactness = policy
        rounds += 1
        for name, stage in (("normalize", normalize.run), ("fuse", fuse_stage)):
            summary = _stage(name, timed, options,
                             lambda stage=stage, model=model: stage(model, options))
            if summary is not None:
                report.stages[name] = summary
            if options.debug:
                verify_graph(model.graph)
        loose = unconfined_sites(model.graph, FUSED_DOMAIN) if policy.inexact else frozenset()
        if not loose:
            break
        policy = policy.refusing(loose)
        if rounds >= CONFINE_RUNS:  # none at all now (the report still counts what was found)
            policy = ExactnessPolicy(inexact=False, refused=policy.refused)
        model = reimport()
    report.stages["exactness"] = ExactnessSummary(policy, rounds)
    return model


def _may_be_inexact(options: OptimizeOptions) -> bool:
    """Whether a run may make non-exact rewrites at all: not under ``--determinism strict``,
    and not where no rule can fuse (nothing could confine them)."""
    return options.determinism != "strict" and bool(fuse.selected_rules(options))


def _exact_normalize(model: Model, options: OptimizeOptions) -> dict[str, int]:
    model.exactness = ExactnessPolicy(inexact=False)
    return normalize.run(model, options)


@dataclass
class ExactnessSummary:
    """What the run did about non-exact rewrites: how often fusion ran, and which rewrites
    it refused because nothing fused absorbed them (per pass, how many)."""

    policy: ExactnessPolicy
    rounds: int

    def to_json(self) -> dict[str, Any]:
        refused = Counter(rewrite_of(s) for s in self.policy.refused)
        return {"inexact_rewrites": self.policy.inexact, "rounds": self.rounds,
                "refused": dict(sorted(refused.items()))}


def _stage(name: str, timed: Callable[[str, Callable], Any], options: OptimizeOptions,
           fn: Callable[[], Any]) -> Any:
    """One stage, timed; one that raises is a :class:`StageFailure` (the safeguard then holds
    parts back), unless ``--debug`` lets the exception through."""
    try:
        return timed(name, fn)
    except OnnxoptError:
        raise
    except Exception as e:
        if options.debug:
            raise
        raise StageFailure(name, e) from e


def fuse_and_settle(model: Model, options: OptimizeOptions, target: Target
                    ) -> FusionReport | None:
    """Fuse, then settle: one run of the rewrite driver (:func:`run_to_fixed_point`) over
    the normalization passes, with fusion again as its ``once_settled`` rewrite — tried
    each time normalization has settled, it fuses again only where normalization removed
    fused nodes since the last fusion, and its edits set the passes going again, all heard
    by one edit log. The driver's :data:`onnxopt.rewrite.driver.SWEEP_LIMIT` names a rewrite
    that kept making and removing fused nodes.

    A rewrite can leave the nodes it replaced alive through shape readers alone (a
    TorchScript export reads the Shape of its head-merge Transpose to build a Reshape
    target). Such a node is not used, but until normalization folds those shapes it still
    reads its inputs, and a later match that needs them alone is refused ("also used
    outside the match"). After the settle the refused regions get a second round, and
    stage 6 sees only fused nodes whose results are used.

    Fusion again walks every candidate root, not only those the edits reached: the report
    restates every candidate's outcome from that round (what still cannot fuse, and why),
    and the fused nodes are named in the order fusion meets their roots in the graph.
    """
    report = fuse.run(model, options, target)
    if report is None:
        return None
    refuse = _Refuse(report, fuse.fused_node_count(model), options, target)
    run_to_fixed_point(model, normalize.passes(options), debug=options.debug,
                       once_settled=[("fuse again", refuse)])
    # A partial match whose root another rule then fused (a norm pattern that started at a
    # GELU's Add) says nothing about what is left unfused.
    alive = {n.name for n in model.graph.all_nodes()}
    report.regions = [r for r in report.regions
                      if r.status != MatchStatus.PARTIAL or r.root in alive]
    return report


@dataclass
class _Refuse:
    """Fusion as a rewrite of the settle: nothing while the fused nodes are those the last
    fusion left; once normalization removed some, every rule again. The report keeps the
    first round's fusions and takes the new round's word on everything else."""

    report: FusionReport
    fused: int  # fused nodes right after the last fusion
    options: OptimizeOptions
    target: Target

    def __call__(self, model: Model) -> PassResult:
        if fuse.fused_node_count(model) == self.fused:
            return PassResult(0)
        again = fuse.run(model, self.options, self.target)
        self.report.regions = ([r for r in self.report.regions if r.status == MatchStatus.FUSED]
                               + again.regions)
        self.fused = fuse.fused_node_count(model)
        return PassResult(sum(1 for r in again.regions if r.status == MatchStatus.FUSED))


@dataclass
class Explanation:
    """What ``onnxopt explain`` shows: every candidate region, every kernel choice, and what
    the safeguard held back (its report entry; ``None`` where it was not asked)."""

    fusion: FusionReport
    selection: SelectReport | None
    safeguard: dict | None = None

    def to_json(self) -> dict:
        return {"fusion": self.fusion.to_json(),
                "selection": self.selection.to_json() if self.selection else None,
                "safeguard": _jsonable(self.safeguard)}


def explain_model(result: OptimizeResult, rule: str | None = None) -> Explanation:
    """What a run of ``optimize`` did, from its report: the result the safeguard passed
    (:func:`onnxopt.safeguard.explain_guarded`), so what ``explain`` says is what the written
    file holds — a region the safeguard held back is refused there, with its reason."""
    stages = result.report.stages
    report = stages.get("fuse") or FusionReport()
    selection = stages.get("select")
    if rule:  # a family, as --only takes it
        report = FusionReport([r for r in report.regions if r.family == rule])
        if selection is not None:
            selection.selections = [s for s in selection.selections if s.rule == rule]
    return Explanation(report, selection, stages.get("safeguard"))


def _jsonable(v: Any) -> Any:
    if hasattr(v, "to_json"):
        return v.to_json()
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v
