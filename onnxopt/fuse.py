"""Stages 3–5 driven together: match by root op, check legality, rewrite.

Rules are indexed by root op type; a worklist holds nodes to try, in every graph of
the model (the main graph and each If/Loop/Scan body, outer graphs first). It is the
rewrite driver's (:class:`onnxopt.rewrite.driver.NodeWorklist`), fed by the graph's edit
events: when a rule fires, the nodes its edits touched (the readers of its new outputs)
and the nodes it made are queued again, so the cost grows with the graph, not with its
square. For every rule the driver keeps what
``explain`` shows: each region fused, each region refused with the legality reason,
and the best partial match with the reason it stopped — each reason a
:class:`~onnxopt.refusal.Refusal`, whose code the report groups by. The fused nodes a
rule makes are checked against their op's schema (:data:`onnxopt.ops.FUSED_OPS`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from onnxopt.errors import UsageError
from onnxopt.ir.builder import FUSED_DOMAIN, NodeBuilder
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.exactness import NO_SITES, rewrite_of
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.ir.verifier import verify_graph
from onnxopt.legality.predicates import used_outside
from onnxopt.legality.target import Target
from onnxopt.match.pattern import Builder, Match, Trace, match_pattern, pattern_names
from onnxopt.ops import FUSED_OPS
from onnxopt.options import OptimizeOptions
from onnxopt.refusal import Refusal
from onnxopt.rewrite.driver import NodeWorklist, listening
from onnxopt.rules import all_rules
from onnxopt.rules.base import Facts, Rule


def selected_rules(options: OptimizeOptions) -> list[Rule]:
    """The built-in rules and the caller's own, less those ``--only``/``--disable`` exclude.
    They name families (``layer_norm`` is both of its spellings' rules), or, from the Python
    API, one rule by its own name (``layer_norm_op``)."""
    rules = [*all_rules(), *options.extra_rules]
    known = {r.family for r in rules} | {r.name for r in rules}
    for name in set(options.only) | set(options.disable):
        if name not in known:
            raise UsageError(f"unknown rule '{name}' (rules: {', '.join(sorted(known))})")
    if not options.rules:
        return []
    if options.only:
        rules = [r for r in rules if {r.family, r.name} & options.only]
    return [r for r in rules if not {r.family, r.name} & options.disable]


def run(model: Model, options: OptimizeOptions, target: Target) -> FusionReport | None:
    """The fuse stage: every selected rule over every graph, for the run's target (the
    pipeline builds it once and settles after)."""
    if not options.fuse:
        return None
    return fuse(model, selected_rules(options), target, debug=options.debug,
                hold_back=options.skips_region)


def fused_node_count(model: Model) -> int:
    return sum(1 for n in model.graph.all_nodes() if n.domain == FUSED_DOMAIN)


# A partial match is worth reporting once it got a few nodes past the root.
CANDIDATE_PROGRESS = 3
HELD_BACK = "held back: with this fusion the result did not pass the output checks"
HELD_BACK_CODE = "held_back"  # the code of a region the safeguard (or --bisect) held back


class MatchStatus(StrEnum):
    """What became of a candidate region (a ``str``: it prints and compares as its value)."""

    FUSED = "fused"
    REFUSED = "refused"  # matched, and legality (or a hold-back) said no
    PARTIAL = "partial"  # the pattern got some nodes in, then stopped


@dataclass
class Region:
    """One candidate region of one rule: fused, refused, or a partial match.

    ``code`` is the refusal's stable code (None where fused): what reports group by, while
    ``detail`` is the sentence (fused: what was matched) a person reads."""

    rule: str  # the rule's own name (unique)
    family: str  # its family, what the summary counts by (:class:`onnxopt.rules.base.Rule`)
    root: str
    status: MatchStatus
    detail: str
    nodes: int = 0
    # The non-exact rewrites (by pass) whose results this fused region absorbed or reads:
    # the places where it is not bit for bit the model's own computation besides the fused op.
    inexact: tuple[str, ...] = ()
    code: str | None = None

    @classmethod
    def not_fused(cls, rule: str, family: str, root: str, status: MatchStatus,
                  reason: Refusal, nodes: int) -> Region:
        """A refused or partial region, said with ``reason``'s sentence and code."""
        return cls(rule, family, root, status, reason.text, nodes, code=reason.code)

    def to_json(self) -> dict:
        return {"rule": self.rule, "family": self.family, "root": self.root,
                "status": self.status.value,
                "code": self.code, "detail": self.detail, "nodes": self.nodes,
                "inexact": list(self.inexact)}


@dataclass
class FusionReport:
    regions: list[Region] = field(default_factory=list)

    def summary(self) -> dict[str, dict]:
        """Per rule: regions by status, and the regions not fused counted by their sentence
        (``reasons``) and by their code (``codes``: what groups, since sentences name values),
        the most common first."""
        out: dict[str, dict] = {}
        reasons: dict[str, Counter] = {}
        codes: dict[str, Counter] = {}
        for r in self.regions:
            entry = out.setdefault(r.family, {"fused": 0, "refused": 0, "partial": 0})
            entry[r.status.value] += 1
            if r.status != MatchStatus.FUSED:
                reasons.setdefault(r.family, Counter())[r.detail] += 1
                codes.setdefault(r.family, Counter())[r.code] += 1
        for family, entry in out.items():
            entry["reasons"] = dict(reasons.get(family, Counter()).most_common())
            entry["codes"] = dict(codes.get(family, Counter()).most_common())
        return out

    def count(self, family: str, status: str = MatchStatus.FUSED) -> int:
        """Regions of ``status`` of the rules of ``family`` (the names ``--only`` takes)."""
        return sum(1 for r in self.regions if r.family == family and r.status == status)

    def to_json(self) -> dict:
        return {"summary": self.summary(), "regions": [r.to_json() for r in self.regions]}


class MatchError(AssertionError):
    """A rule misbehaved (debug mode): claimed success without changing the graph."""


def fuse(model: Model, rules: list[Rule], target: Target, *, debug: bool = False,
         apply: bool = True, hold_back: Callable[[str, str], bool] | None = None
         ) -> FusionReport:
    """Apply ``rules`` to every graph of the model — the main graph and each If/Loop/Scan
    body, outer graphs first — with ``apply=False`` only report. ``hold_back(rule, root)``
    names regions that must stay as they are (the safeguard's per-fusion rollback)."""
    report = FusionReport()
    by_root: dict[str, list[tuple[Rule, object, frozenset[str]]]] = {}
    p = Builder()
    for rule in rules:
        rule.begin(model)
        pattern = rule.pattern(p)
        names = pattern_names(pattern)
        for root in (rule.root,) if isinstance(rule.root, str) else rule.root:
            by_root.setdefault(root, []).append((rule, pattern, names))
    for graph in model.graph.all_graphs():
        _run_worklist(graph, by_root, target, report, debug, apply,
                      hold_back or (lambda _rule, _root: False))
    return report


# A rule rewrites at most this many times per node of a graph (and at least the floor): a rule
# whose output matches its own pattern again would otherwise never stop (a one-node model grew
# to 790 MB in 30 s). Each rewrite replaces at least its root, so a rule that settles stays far
# below the cap.
REWRITES_PER_NODE = 2
MIN_REWRITE_CAP = 64
STOPPED = "stopped_at_rewrite_cap"  # the code of the refusal of a rule that hit the cap


def rewrite_cap(node_count: int) -> int:
    return max(MIN_REWRITE_CAP, REWRITES_PER_NODE * node_count)


def _run_worklist(graph: Graph, by_root, target: Target, report: FusionReport, debug: bool,
                  apply: bool, hold_back: Callable[[str, str], bool]) -> None:
    work = NodeWorklist(graph, graph, lambda n: n.op_type in by_root)
    with listening(graph.names, work):
        _drain(graph, work, by_root, target, report, debug, apply, hold_back)


def _drain(graph: Graph, work: NodeWorklist, by_root, target: Target, report: FusionReport,
           debug: bool, apply: bool, hold_back: Callable[[str, str], bool]) -> None:
    cap, nodes = rewrite_cap(len(graph)), len(graph)
    rewrites: dict[str, int] = {}  # per rule; past the cap the rule is stopped in this graph
    done: dict[tuple[int, str], Node] = {}  # holds the nodes, so ids are never reused
    for node in work:
        for rule, pattern, names in by_root.get(node.op_type, ()):
            key = (id(node), rule.name)
            if key in done or rewrites.get(rule.name, 0) > cap:
                continue
            done[key] = node
            trace = Trace()
            m = match_pattern(pattern, node, trace, names)
            if m is None:
                best = trace.best
                if best is not None and best.progress >= CANDIDATE_PROGRESS:
                    report.regions.append(Region.not_fused(rule.name, rule.family, node.name,
                                                           MatchStatus.PARTIAL, best.reason,
                                                           best.progress))
                continue
            outside = used_outside(m.nodes, m.root)
            verdict = rule.outside_use(m, outside) if outside else None
            if verdict is None:  # (nothing read outside, or what is the rule takes as output)
                verdict = _legal(rule, m, target)
            reason = verdict if isinstance(verdict, Refusal) else None
            if not reason and hold_back(rule.name, node.name):
                reason = Refusal(HELD_BACK_CODE, HELD_BACK, node.name)
            if not reason and apply and rewrites.get(rule.name, 0) == cap:
                rewrites[rule.name] = cap + 1  # stopped: no more matching in this graph
                reason = Refusal(STOPPED, f"stopped after {cap} rewrites in a graph of {nodes} "
                                 "node(s): its output matches its own pattern again", node.name)
            if reason:
                report.regions.append(Region.not_fused(rule.name, rule.family, node.name,
                                                       MatchStatus.REFUSED, reason, len(m.nodes)))
                continue
            if apply:
                rewrites[rule.name] = rewrites.get(rule.name, 0) + 1
            region = Region(rule.name, rule.family, node.name, MatchStatus.FUSED,
                            rule.describe(m, verdict), len(m.nodes))
            report.regions.append(region)
            if not apply:
                continue
            with work.rewriting():  # its edits queue the nodes they touched
                sites = _apply(graph, rule, m, verdict, debug)
            region.inexact = tuple(sorted({rewrite_of(s) for s in sites}))
            break


def _legal(rule: Rule, m: Match, target: Target) -> Refusal | Facts | None:
    """``rule.legal``, held to its contract: a rule that answers with anything else (a bare
    sentence, as rules once did) is a bug in the rule, said at once rather than fused."""
    verdict = rule.legal(m, target)
    if verdict is not None and not isinstance(verdict, (Refusal, Facts)):
        raise TypeError(f"rule {rule.name}: legal() returned {type(verdict).__name__}; it "
                        "returns a Refusal, Facts or None")
    return verdict


def _apply(graph: Graph, rule: Rule, m: Match, facts: Facts | None, debug: bool
           ) -> frozenset[str]:
    """Rewrite the match; return the non-exact rewrites the fused region now holds
    (:mod:`onnxopt.ir.exactness`)."""
    extra = facts.outputs if facts is not None else ()
    anchor = extra[0].producer if extra else m.root
    # Named after the family: the written model's node names are the same whichever of a
    # family's spellings a region had (explain finds a rule's kernels by that name).
    b = NodeBuilder(graph, anchor, rule.family, schemas=FUSED_OPS)
    result = rule.rewrite(b, m, facts)
    # A Value replaces the root's first output; a list replaces each of the match's outputs
    # (None for one nobody reads), or, one shorter by the root's further outputs, its first
    # output and the extra ones. Root outputs left without a replacement must be unread.
    outputs = [*m.root.outputs, *extra]
    new_outputs = result if isinstance(result, list) else [result]
    if len(new_outputs) == 1 + len(extra):
        new_outputs = [new_outputs[0], *[None] * (len(m.root.outputs) - 1), *new_outputs[1:]]
    if len(new_outputs) != len(outputs):
        raise MatchError(f"rule {rule.name}: its rewrite gave {len(new_outputs)} outputs for the "
                         f"{len(outputs)} of the match at {m.root.name}")
    if debug and not b.nodes:
        raise MatchError(f"rule {rule.name} reported a rewrite but created no node")
    for old, new in zip(outputs, new_outputs):
        if new is None:
            if old.num_uses or old.is_graph_output:
                raise MatchError(f"rule {rule.name}: no replacement for %{old.name}, "
                                 "which is read")
            continue
        if new.dtype is None:
            new.dtype = old.dtype
        if new.shape is None:
            new.shape = old.shape
        if not replace_value(graph, old, new):
            raise MatchError(f"rule {rule.name}: cannot replace graph output %{old.name}")
    # Until nothing changes: a matched node read only by another matched node dies with it,
    # whatever order the pattern listed them in (a dead fused node left here would be bound
    # by stage 6 and would block later matches that share its inputs).
    absorbed = facts.absorbed if facts is not None else ()
    pending = [n for n in [*reversed(m.nodes), *absorbed] if n.graph is graph]
    while True:
        dead = [n for n in pending if remove_if_dead(graph, n)]
        if not dead:
            break
        pending = [n for n in pending if n.graph is graph]
    # What the region absorbed of non-exact rewrites is the fused op's business now: its
    # outputs are the fused kernel's numbers, not a carrier of those sites.
    sites = set()
    made = {id(n) for n in b.nodes}
    for v in new_outputs:
        if v is not None and id(v.producer) in made:
            sites.update(v.inexact)
            v.inexact = NO_SITES
    for node in b.nodes:
        for v in node.inputs:
            if v is not None:
                sites.update(v.inexact)
    if debug:  # from the outermost graph: a body reads its enclosing graphs' values
        verify_graph(graph.root())
    return frozenset(sites)
