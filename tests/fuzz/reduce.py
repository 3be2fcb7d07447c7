"""Shrink a failing fuzz case to a smaller model that fails the same way.

Why: a 600-node mutant with three mutations is a poor bug report. The reducer
tries, in rounds, candidates that are smaller in some way — each mutation step
alone, one graph output only, a cut that turns the front of the graph into graph
inputs, the tail of the graph dropped, dead nodes and unused initializers removed
— runs them through the same pool, and keeps the first that still shows the same
failure signature. It is greedy and budgeted: "minimal-ish", not minimal.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from typing import Any

import onnx
from onnx import ModelProto

from .cases import bytes_recipe
from .harness import Outcome

RunBatch = Callable[[list[dict[str, Any]]], list[Outcome]]


def same_failure(a: Outcome, b: Outcome) -> bool:
    if a.verdict != b.verdict:
        return False
    if a.verdict in ("wrong_result", "hang", "crash", "broken_output"):
        return True
    return a.signature == b.signature


def step_subsets(steps: list[list[Any]]) -> list[list[list[Any]]]:
    singles = [[s] for s in steps]
    pairs = [[a, b] for i, a in enumerate(steps) for b in steps[i + 1:]]
    return [s for s in singles + pairs if len(s) < len(steps)]


def parse(data: bytes) -> ModelProto | None:
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # noqa: BLE001 - not a proto: only step subsets apply
        return None
    return model if model.HasField("graph") else None


def prune(model: ModelProto) -> ModelProto:
    """Nodes whose outputs reach no graph output, and initializers nobody reads, removed."""
    out = ModelProto()
    out.CopyFrom(model)
    g = out.graph
    live = {o.name for o in g.output}
    keep = []
    for node in reversed(list(g.node)):
        if any(o in live for o in node.output):
            keep.append(node)
            live.update(node.input)
            live.update(_captured(node))
    del g.node[:]
    g.node.extend(reversed(keep))
    inits = [t for t in g.initializer if t.name in live]
    del g.initializer[:]
    g.initializer.extend(inits)
    inputs = [i for i in g.input if i.name in live]
    del g.input[:]
    g.input.extend(inputs)
    vis = [v for v in g.value_info if v.name in live]
    del g.value_info[:]
    g.value_info.extend(vis)
    return out


def _captured(node: onnx.NodeProto) -> set[str]:
    names: set[str] = set()
    for attr in node.attribute:
        for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in sub.node:
                names.update(inner.input)
                names |= _captured(inner)
    return names


def _infer_child(data: bytes, conn: Connection) -> None:
    model = ModelProto()
    model.ParseFromString(data)
    try:
        conn.send(onnx.shape_inference.infer_shapes(model, strict_mode=False)
                  .SerializeToString())
    except Exception:  # noqa: BLE001 - no types: the cuts that need them are skipped
        conn.send(b"")


def _types(model: ModelProto, timeout: float = 30.0) -> dict[str, onnx.TypeProto]:
    """Value types from ONNX shape inference, run in a forked child: on a broken model
    onnx's C++ can abort the whole process, and this one is the fuzzer's parent."""
    ctx = mp.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_infer_child, args=(model.SerializeToString(), sender))
    proc.start()
    sender.close()
    data = b""
    try:
        if receiver.poll(timeout):
            data = receiver.recv()
    except (EOFError, OSError):
        data = b""
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        receiver.close()
    inferred = parse(data) if data else None
    g = (inferred or model).graph
    return {v.name: v.type for v in list(g.value_info) + list(g.input) + list(g.output)}


def keep_output(model: ModelProto, index: int) -> ModelProto:
    out = ModelProto()
    out.CopyFrom(model)
    chosen = out.graph.output[index]
    del out.graph.output[:]
    out.graph.output.append(chosen)
    return prune(out)


def cut_front(model: ModelProto, count: int, types: dict[str, onnx.TypeProto]
              ) -> ModelProto | None:
    """The first ``count`` nodes removed; the values they made that others read become graph
    inputs (typed by shape inference; None where a type is unknown)."""
    out = ModelProto()
    out.CopyFrom(model)
    g = out.graph
    gone, rest = list(g.node)[:count], list(g.node)[count:]
    made = {o for n in gone for o in n.output if o}
    needed = {i for n in rest for i in list(n.input) + list(_captured(n))} | {
        o.name for o in g.output}
    new_inputs = sorted(made & needed)
    if any(name not in types or not types[name].HasField("tensor_type") for name in new_inputs):
        return None
    del g.node[:]
    g.node.extend(rest)
    for name in new_inputs:
        vi = g.input.add()
        vi.name = name
        vi.type.CopyFrom(types[name])
    return prune(out)


def cut_back(model: ModelProto, count: int, types: dict[str, onnx.TypeProto]
             ) -> ModelProto | None:
    """Only the first ``count`` nodes kept, the last one's outputs made the graph outputs."""
    out = ModelProto()
    out.CopyFrom(model)
    g = out.graph
    nodes = list(g.node)[:count]
    if not nodes:
        return None
    last = [o for o in nodes[-1].output if o]
    if not last or any(name not in types for name in last):
        return None
    del g.output[:]
    for name in last:
        vi = g.output.add()
        vi.name = name
        vi.type.CopyFrom(types[name])
    return prune(out)


def strip(model: ModelProto) -> ModelProto:
    out = prune(model)
    out.doc_string = ""
    del out.metadata_props[:]
    for node in out.graph.node:
        node.doc_string = ""
    return out


def structural_candidates(data: bytes) -> Iterable[bytes]:
    model = parse(data)
    if model is None:
        return
    yield strip(model).SerializeToString()
    for i in range(len(model.graph.output)):
        if len(model.graph.output) > 1:
            yield keep_output(model, i).SerializeToString()
    types = _types(model)
    n = len(model.graph.node)
    sizes = sorted({max(1, n // k) for k in (2, 4, 8, 16, 32)} | {1}, reverse=True)
    for size in sizes:
        for cand in (cut_front(model, size, types), cut_back(model, n - size, types)):
            if cand is not None and len(cand.graph.node) < n:
                yield cand.SerializeToString()


def reduce(failure: Outcome, data: bytes, extra: dict[str, bytes], run: RunBatch,
           budget_s: float = 90.0, batch: int = 4) -> tuple[bytes, dict[str, bytes], str]:
    """The smallest variant found that fails like ``failure``: (bytes, extra files, how)."""
    deadline = time.monotonic() + budget_s
    best, best_extra, how = data, extra, "unreduced"
    recipe = failure.recipe
    if recipe.get("kind") == "mutant" and len(recipe.get("steps", [])) > 1:
        cands = [dict(recipe, steps=s, case_id=f"{failure.case_id}-r{i}")
                 for i, s in enumerate(step_subsets(recipe["steps"]))]
        hit = _first_hit(failure, cands, run, batch, deadline)
        rebuilt = _rebuild(hit) if hit is not None else None
        if rebuilt is not None:
            best, best_extra = rebuilt
            how = f"mutation steps {hit.recipe.get('steps')}"
    round_no = 0
    steps_how = how
    while time.monotonic() < deadline:
        round_no += 1
        cands = [bytes_recipe(f"{failure.case_id}-s{round_no}-{i}", c, "reduced", best_extra)
                 for i, c in enumerate(structural_candidates(best)) if len(c) < len(best)]
        hit = _first_hit(failure, cands, run, batch, deadline)
        if hit is None:
            break
        best = next(c["data"] for c in cands if c["case_id"] == hit.case_id)
        how = (f"{steps_how}, then " if steps_how != "unreduced" else "") + (
            f"{round_no} structural rounds")
    return best, best_extra, how


def _rebuild(hit: Outcome) -> tuple[bytes, dict[str, bytes]] | None:
    """The bytes of a replayed mutant (the worker that ran it sent them back)."""
    return (hit.data, hit.extra_files) if hit.data is not None else None


def _first_hit(failure: Outcome, cands: list[dict[str, Any]], run: RunBatch, batch: int,
               deadline: float) -> Outcome | None:
    for start in range(0, len(cands), batch):
        if time.monotonic() > deadline:
            return None
        outcomes = {o.case_id: o for o in run(cands[start:start + batch])}
        for cand in cands[start:start + batch]:
            got = outcomes.get(cand["case_id"])
            if got is not None and same_failure(failure, got):
                return got
    return None
