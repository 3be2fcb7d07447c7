"""``--tune``: time every legal kernel of a fused-op signature on this machine, keep the fastest.

Like TensorRT's tactic selection: for each distinct signature (op, attributes,
input shapes at representative sizes, dtypes) every legal candidate — the
decomposition always among them — is emitted into a micro-model holding just
that op (plus the head-split/merge Transposes around it in the model, which
ONNX Runtime cancels against the emitted layout conversions), and timed in
ONNX Runtime on the target's provider: 1 intra-op thread, no spinning, the
candidates interleaved, after a warm-up, for at least ``MIN_ROUNDS`` rounds and
``MIN_SECONDS`` (so a sub-millisecond kernel is run hundreds of times).

The tuned choice is the *default* — what the cost model picks without ``--tune`` —
unless another candidate is clearly faster (:func:`decide`): its slower quartile
must beat the default's faster quartile by ``MARGIN``, in two independent
measurements alike. Timings that differ by less than their own noise then decide
nothing, and reruns write the same file: on a shared runner, medians of two runs
picked three different attention kernels in four runs.

Decisions go to a JSON cache keyed by signature, provider, ONNX Runtime
version and machine (host name and CPU model), so later runs and other
machines of the same kind (a CI fleet) reuse them; an entry is re-measured
only for candidates it lacks.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onnxopt import evaluation
from onnxopt.exporter import export_model
from onnxopt.ir.builder import FUSED_DOMAIN, make_attr
from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import STANDARD_DOMAINS, Node
from onnxopt.ir.value import Value
from onnxopt.legality.target import Target
from onnxopt.ops import attributes_of
from onnxopt.refusal import refusal
from onnxopt.select._emit import BNSH_TO_BSNH, transposed_from
from onnxopt.select.bind import bind
from onnxopt.select.kernel import Kernel
from onnxopt.select.selector import Selection
from onnxopt.select.shapes import Binding

CACHE_FORMAT = 1
MIN_ROUNDS = 21  # interleaved rounds of every candidate, at the least
MIN_SECONDS = 0.3  # and for at least this long: more rounds where kernels are fast
MAX_ROUNDS = 2000
BUDGET_SECONDS = 3.0  # a signature of slow kernels stops here (after 5 rounds at the least)
WARMUP_RUNS = 3
# How much faster than the default's faster quartile a candidate's slower one must be. Kernels
# closer than this swap places with the machine's state, not with their code: ORT's
# RotaryEmbedding and its decomposition measured equal in one run and 5-9% apart in another, in
# both of two measurements (tuned LLaMA, ten runs); paired controls here vary by about 10%.
MARGIN = 0.10


def default_cache_path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "onnxopt", "tuning.json")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_id() -> str:
    return f"{platform.node()}/{cpu_model()}"


def _fmt_attr(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt_attr(x) for x in v) + "]"
    return str(v)


def signature(node: Node, binding: Binding) -> str | None:
    """Op, attributes (every field of its record, so a default spelled out or left out reads
    the same), inputs (dtype, representative shape, constant or not); None when a shape is
    unknown (such a node is ranked by the cost model instead)."""
    parts = [node.op_type]
    parts += [f"{k}={_fmt_attr(v)}"
              for k, v in sorted(attributes_of(node).as_attributes().items())]
    for v in node.inputs:
        if v is None:
            parts.append("-")
            continue
        shape = binding.shape(v.shape)
        if shape is None:
            return None
        kind = "const" if v.const is not None else ("bsnh" if _bsnh_source(v) else "")
        parts.append(f"{v.dtype}{list(shape)}{kind}")
    parts.append(f"outputs={sum(1 for o in node.outputs if o.num_uses or o.is_graph_output)}")
    if _merge_consumer(node) is not None:
        parts.append("merged")
    return "|".join(parts)


def cache_key(sig: str, target: Target, ort_version: str) -> str:
    return f"{sig}|{target.provider}|ort {ort_version}|{machine_id()}"


@dataclass(frozen=True)
class Timing:
    """A kernel's measured milliseconds: the median, and the quartiles around it (the middle
    half of the runs), which say how noisy the median is."""

    median: float
    fast: float  # the first quartile
    slow: float  # the third quartile

    @classmethod
    def of(cls, samples_ms: list[float]) -> Timing:
        if len(samples_ms) < 2:
            return cls.exact(samples_ms[0])
        fast, median, slow = statistics.quantiles(samples_ms, n=4, method="inclusive")
        return cls(median, fast, slow)

    @classmethod
    def exact(cls, ms: float) -> Timing:
        """A time known without its spread (a cache entry written before spreads were kept)."""
        return cls(ms, ms, ms)

    def combined(self, other: Timing) -> Timing:
        """The geometric mean with ``other`` (a candidate timed at two sequence lengths)."""
        return Timing(*((a * b) ** 0.5 for a, b in zip(
            (self.median, self.fast, self.slow), (other.median, other.fast, other.slow))))

    def spread(self) -> str:
        return f"{self.fast:.3g}-{self.slow:.3g} ms"


def clearly_faster(candidate: Timing, default: Timing, margin: float = MARGIN) -> bool:
    """Whether ``candidate`` beats ``default`` by more than the noise of either: its slower
    quartile is below the default's faster one by ``margin``."""
    return candidate.slow * (1 + margin) < default.fast


def decide(default: str, timings: Mapping[str, Timing], order: Iterable[str],
           margin: float = MARGIN) -> str:
    """The kernel to use: ``default`` (the untuned choice) unless another is clearly faster.

    Challengers are tried in ``order`` (the cost model's ranking), each against the choice so
    far, so two challengers that are equally fast do not take turns with the noise: the first
    one stands. A default without a timing stands."""
    chosen = default
    if default not in timings:
        return chosen
    for name in order:
        if name != chosen and name in timings and clearly_faster(timings[name], timings[chosen],
                                                                 margin):
            chosen = name
    return chosen


def tuned_selection(untuned: Selection, legal: list[Kernel], timings: Mapping[str, Timing],
                    confirming: Mapping[str, Timing] | None = None) -> Selection:
    """The selection ``--tune`` makes from ``untuned`` (the cost model's, which rejected the
    kernels that failed to run): its choice is the default, kept unless :func:`decide` finds
    another clearly faster, in ``timings`` and in ``confirming`` (a second, independent
    measurement) alike; every other timed kernel is rejected with its time.

    Two kernels equally fast come out clearly apart in one measurement now and then (the
    quartiles of one measurement are narrower than the noise between measurements); asking
    two to agree makes that a product of two such chances, and reruns write the same file."""
    default = untuned.chosen.name
    order = sorted(timings, key=lambda name: (untuned.costs.get(name, float("inf")), name))
    chosen = unconfirmed = decide(default, timings, order)
    if confirming and chosen != default and decide(default, confirming, order) != chosen:
        chosen = default  # the second measurement did not say so too: noise, not speed
    else:
        unconfirmed = None
    best = timings.get(chosen)
    rejected = [(k, why) for k, why in untuned.rejected if k.name not in timings]
    for k in legal:
        if k.name == chosen or k.name not in timings:
            continue
        t = timings[k.name]
        why, code = f"measured {t.median:.3g} ms", "measured_slower"
        if best is not None:
            why += f"; {chosen} {best.median:.3g} ms"
            if k.name == unconfirmed:
                again, against = confirming.get(k.name), confirming.get(chosen)
                code = "not_confirmed"
                why += (f" (clearly faster in one measurement, not in a second: "
                        f"{again.median:.3g} ms against {against.median:.3g} ms)"
                        if again and against else " (clearly faster in one measurement only)")
            elif t.median < best.median:
                code = "within_noise"
                why += (f" (within the noise: the middle halves of the runs, {t.spread()} "
                        f"against {best.spread()}, are not {MARGIN:.0%} apart)")
        rejected.append((k, refusal(code, why)))
    kernel = next(k for k in legal if k.name == chosen)
    return Selection(untuned.node, untuned.op, kernel, rejected,
                     costs={name: t.median for name, t in timings.items()}, unit="ms",
                     basis="tuned")


class TuningCache:
    """The decisions file: ``{"format": 1, "entries": {key: {"times_ms": …, "spread_ms": …,
    "failed": …}}}``; ``spread_ms`` holds each kernel's quartiles (an entry without them is read
    as exact times)."""

    def __init__(self, path: str | None) -> None:
        self.path = path or default_cache_path()
        self.entries: dict[str, dict] = {}
        self.dirty = False
        try:
            data = json.loads(Path(self.path).read_text())
            if data.get("format") == CACHE_FORMAT:
                self.entries = dict(data.get("entries", {}))
        except (OSError, ValueError):
            pass

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def timings(self, key: str) -> dict[str, Timing]:
        """The entry's timings by kernel (none where there is no entry)."""
        entry = self.entries.get(key, {})
        spreads = entry.get("spread_ms", {})
        out = {}
        for name, median in entry.get("times_ms", {}).items():
            fast, slow = spreads.get(name, (median, median))
            out[name] = Timing(median, fast, slow)
        return out

    def confirming(self, key: str) -> dict[str, Timing]:
        """The entry's second measurement by kernel (none in an entry written before)."""
        return {name: Timing(*values)
                for name, values in self.entries.get(key, {}).get("confirm_ms", {}).items()}

    def put(self, key: str, timings: Mapping[str, Timing], failed: dict[str, str],
            runs: int, confirming: Mapping[str, Timing] | None = None) -> None:
        old = self.entries.get(key, {})
        confirm = {k: [round(t.median, 5), round(t.fast, 5), round(t.slow, 5)]
                   for k, t in (confirming or {}).items()}
        self.entries[key] = {
            "times_ms": {**old.get("times_ms", {}),
                         **{k: round(t.median, 5) for k, t in timings.items()}},
            "spread_ms": {**old.get("spread_ms", {}),
                          **{k: [round(t.fast, 5), round(t.slow, 5)] for k, t in timings.items()}},
            "confirm_ms": {**old.get("confirm_ms", {}), **confirm},
            "failed": {**old.get("failed", {}), **failed},
            "runs": runs,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tuning-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"format": CACHE_FORMAT, "entries": dict(sorted(self.entries.items()))},
                          f, indent=1)
            os.chmod(tmp, 0o644)  # shareable (CI caches, other users), like any file we write
            os.replace(tmp, path)
        except BaseException:  # a full disk, an interrupt: no temporary file is left behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.dirty = False


# ----------------------------------------------------------------------------- micro-models


def _bsnh_source(v: Value) -> Value | None:
    """The model's [B, S, H, D] value when ``v`` is its head-split Transpose."""
    src = transposed_from(v, BNSH_TO_BSNH) if v.rank == 4 else None
    return src if src is not None and src.const is None else None


def _merge_consumer(node: Node) -> Node | None:
    """The head-merge Transpose that alone reads a BNSH output."""
    out = node.outputs[0]
    if out.rank != 4 or out.num_uses != 1 or out.is_graph_output:
        return None
    user = out.uses()[0][0]
    return user if transposed_from(user.output, BNSH_TO_BSNH) is out else None


def _head_split(graph: Graph, name: str, src: Value, v: Value, binding: Binding) -> Value:
    """A micro-model input ``name`` shaped as the model's [B, S, H, D] ``src``, split into
    heads as ``v`` is."""
    x = graph.add_input(name, src.dtype, binding.shape(src.shape))
    t = graph.make_node("Transpose", [x], attrs={"perm": make_attr(list(BNSH_TO_BSNH))})
    t.output.dtype, t.output.shape = v.dtype, binding.shape(v.shape)
    return t.output


def _cache_concat(v: Value, node: Node):
    """(Concat, past, new) where ``v`` is a key/value cache ``Concat(past, new)`` that only
    ``node`` reads (and perhaps the model's outputs): the micro-model keeps it, so that every
    candidate is timed with the cache's copy, and a kernel that takes the Concat over (past in,
    present out) can be timed at all."""
    concat = v.producer
    if (concat is None or concat.op_type != "Concat" or concat.domain not in STANDARD_DOMAINS
            or len(concat.inputs) != 2 or any(x is None or x.const is not None
                                              for x in concat.inputs)
            or any(user is not node for user, _ in v.uses())):
        return None
    return concat, concat.inputs[0], concat.inputs[1]


def micro_model(model: Model, node: Node, kernel: Kernel, target: Target,
                binding: Binding) -> Model:
    """A model holding just ``node`` (bound to ``kernel``) at representative sizes."""

    graph = Graph("tune")
    inputs: list[Value | None] = []
    cache_outputs: list[Value] = []  # a key/value cache Concat the model also outputs
    for i, v in enumerate(node.inputs):
        if v is None:
            inputs.append(None)
        elif v.const is not None:
            inputs.append(graph.add_constant(v.const, hint=f"c{i}"))
        elif (src := _bsnh_source(v)) is not None:
            inputs.append(_head_split(graph, f"in{i}", src, v, binding))
        elif (cache := _cache_concat(v, node)) is not None:
            concat, past, new = cache
            parts = [graph.add_input(f"in{i}_past", past.dtype, binding.shape(past.shape)),
                     _head_split(graph, f"in{i}_new", src, new, binding)
                     if (src := _bsnh_source(new)) is not None
                     else graph.add_input(f"in{i}_new", new.dtype, binding.shape(new.shape))]
            c = graph.make_node("Concat", parts, attrs=dict(concat.attrs))
            c.output.dtype, c.output.shape = v.dtype, binding.shape(v.shape)
            inputs.append(c.output)
            if v.is_graph_output:
                cache_outputs.append(c.output)
        else:
            inputs.append(graph.add_input(f"in{i}", v.dtype, binding.shape(v.shape)))
    copy = graph.make_node(node.op_type, inputs, num_outputs=len(node.outputs),
                           domain=FUSED_DOMAIN, attrs=dict(node.attrs), name="fused")
    outputs = []
    for old, new in zip(node.outputs, copy.outputs):
        new.dtype, new.shape = old.dtype, binding.shape(old.shape)
        if old.num_uses or old.is_graph_output:
            outputs.append(new)
    merge = _merge_consumer(node)
    if merge is not None:
        t = graph.make_node("Transpose", [copy.outputs[0]],
                            attrs={"perm": make_attr(list(BNSH_TO_BSNH))})
        t.output.dtype, t.output.shape = merge.output.dtype, binding.shape(merge.output.shape)
        outputs[0] = t.output
    graph.set_outputs(outputs + cache_outputs)
    micro = Model(graph, opset_imports=dict(model.opset_imports), ir_version=model.ir_version)
    micro.opset_imports.setdefault(FUSED_DOMAIN, 1)
    bind(micro, copy, kernel, target)
    micro.opset_imports.pop(FUSED_DOMAIN, None)
    return micro


def _session(proto_bytes: bytes, target: Target):
    # One thread, no spinning: kernels timed back to back must not compete for the cores.
    return evaluation.session(proto_bytes, [target.provider], threads=1, inter_op_num_threads=1,
                              config={"session.intra_op.allow_spinning": "0",
                                      "session.inter_op.allow_spinning": "0"})


def _feeds(session, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        kind = inp.type.removeprefix("tensor(").removesuffix(")")
        dtype = numpy_dtype({"float": "float32", "double": "float64"}.get(kind, kind))
        if np.issubdtype(dtype, np.floating):
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[inp.name] = np.ones(shape, dtype)
    return feeds


def measure(model: Model, node: Node, kernels: list[Kernel], target: Target, binding: Binding,
            runs: int = MIN_ROUNDS, budget_s: float = BUDGET_SECONDS
            ) -> tuple[dict[str, Timing], dict[str, str]]:
    """Each kernel's timing on its micro-model, and the kernels that failed (why).

    The candidates run interleaved (each round in another order), ``runs`` rounds at the
    least and for ``MIN_SECONDS``, and each round is read against itself (:func:`blocked`)."""

    sessions, failed = {}, {}
    for k in kernels:
        try:
            proto = export_model(micro_model(model, node, k, target, binding))
            sess = _session(proto.SerializeToString(), target)
        except Exception as e:  # noqa: BLE001 - a kernel that cannot run is rejected with why
            failed[k.name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            continue
        if target.provider not in sess.get_providers():
            # ORT falls back to the CPU silently; timing that would rank for the wrong device
            return {}, {}
        sessions[k.name] = sess
    feeds = {name: _feeds(s) for name, s in sessions.items()}
    samples: dict[str, list[float]] = {name: [] for name in sessions}
    for name, s in list(sessions.items()):
        try:
            for _ in range(WARMUP_RUNS):
                evaluation.run(s, feeds[name])
        except Exception as e:  # noqa: BLE001
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            del sessions[name]
    names = sorted(sessions)
    start = time.perf_counter()
    for r in range(MAX_ROUNDS if names else 0):
        for name in names[r % len(names):] + names[:r % len(names)]:
            begin = time.perf_counter()
            sessions[name].run(None, feeds[name])
            samples[name].append((time.perf_counter() - begin) * 1000)
        elapsed = time.perf_counter() - start
        if (r + 1 >= runs and elapsed >= MIN_SECONDS) or (r >= 4 and elapsed > budget_s):
            break
    return {n: Timing.of(times) for n, times in blocked(samples).items()}, failed


def blocked(samples: Mapping[str, list[float]]) -> dict[str, list[float]]:
    """Every round's times divided by that round's geometric mean, in units of the median
    of those means (milliseconds again).

    Another process on the core slows every kernel of the rounds it lasts through; without
    this, such a stretch widens every kernel's spread, and whether a candidate is clearly
    faster would depend on when the load came. Divided by their round, the times say how the
    kernels compare with each other, which is the question, and keep their scale."""
    names = list(samples)
    rounds = min((len(samples[n]) for n in names), default=0)
    if not rounds:
        return {n: list(samples[n]) for n in names}
    means = [statistics.geometric_mean([samples[n][i] for n in names]) for i in range(rounds)]
    scale = statistics.median(means)
    return {n: [samples[n][i] / means[i] * scale for i in range(rounds)] for n in names}
