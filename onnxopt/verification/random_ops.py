"""Outputs that depend on random ops: made comparable by a shared seed, or left uncompared.

An unseeded ``RandomNormalLike`` draws from a generator ONNX Runtime seeds with the time (in
seconds, once per process), so two correct models run apart differ wherever its noise reaches
(a VITS text-to-speech model: "mismatch" of 2.41). ORT honours a random op's ``seed``
attribute: each kernel then draws a fixed sequence, continued from run to run. So where both
models hold the same random node (same op, name and attributes), both run a copy in which it
has the same seed, and their outputs compare as any other. A random node only one model holds
(rewritten, folded, dropped) cannot be matched: every output it reaches is reported "not
compared: depends on random op ..." rather than as a mismatch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import onnx
from onnx import ModelProto, numpy_helper

RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform",
                        "RandomUniformLike", "Multinomial", "Bernoulli"})
_SEED_IS_INT = frozenset({"Dropout"})  # Dropout's seed is an int; the others' a float

Key = tuple  # (op_type, node name or first output, attributes serialized)


@dataclass(frozen=True)
class RandomPlan:
    """``seeds``: the seed each matched, unseeded random node gets in both models' copies (by
    :func:`node_key`); ``not_compared``: why each output cannot be compared."""

    seeds: dict[Key, int] = field(default_factory=dict)
    not_compared: dict[str, str] = field(default_factory=dict)

    def seeded_names(self) -> list[str]:
        return [f"{key[0]} {key[1]}" for key in self.seeds]


def plan_random(original: ModelProto, optimized: ModelProto) -> RandomPlan:
    """Seed the random nodes both models hold the same number of times; the outputs that any
    other random node reaches, in either model, are not compared."""
    found_a, count_a = _random_nodes(original)
    _, count_b = _random_nodes(optimized)
    matched = sorted(k for k in count_a if count_a[k] == count_b.get(k))
    unmatched = (set(count_a) | set(count_b)) - set(matched)
    seeds = {key: 1 + i for i, key in enumerate(matched) if not _has_seed(found_a[key])}
    not_compared: dict[str, str] = {}
    for model in (original, optimized):
        for name, reason in _reached_outputs(model, unmatched).items():
            not_compared.setdefault(name, f"depends on random op {reason}")
    return RandomPlan(seeds, not_compared)


def seeded(model: ModelProto, seeds: dict[Key, int]) -> ModelProto:
    """``model`` with the ``seed`` attribute of each node in ``seeds`` set, in place."""
    if not seeds:
        return model
    constants = _bool_constants(model.graph)
    for node in _all_nodes(model.graph):
        if _is_random(node, constants) and (key := node_key(node)) in seeds:
            seed = seeds[key]
            node.attribute.append(onnx.helper.make_attribute(
                "seed", seed if node.op_type in _SEED_IS_INT else float(seed)))
    return model


def node_key(node: onnx.NodeProto) -> Key:
    """What identifies a random node across the two models: its op, its name (its first
    output where it has none) and its attributes."""
    attributes = b"".join(a.SerializeToString() for a in sorted(node.attribute,
                                                                key=lambda a: a.name))
    return (node.op_type, node.name or (node.output[0] if node.output else ""), attributes)


def _random_nodes(model: ModelProto) -> tuple[dict[Key, onnx.NodeProto], Counter]:
    """The first random node of each key, and how many nodes share each key."""
    constants = _bool_constants(model.graph)
    first: dict[Key, onnx.NodeProto] = {}
    counts: Counter = Counter()
    for node in _all_nodes(model.graph):
        if _is_random(node, constants):
            key = node_key(node)
            first.setdefault(key, node)
            counts[key] += 1
    return first, counts


def _is_random(node: onnx.NodeProto, constants: dict[str, bool]) -> bool:
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type in RANDOM_OPS:
        return True
    if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
        return constants.get(node.input[2], True)  # training mode unless proved off
    return False


def _has_seed(node: onnx.NodeProto) -> bool:
    return any(a.name == "seed" for a in node.attribute)


def _reached_outputs(model: ModelProto, unmatched: set[Key]) -> dict[str, str]:
    """The graph outputs that an unmatched random node reaches, each with that node."""
    if not unmatched:
        return {}
    reached = _reached(model.graph, unmatched, {}, _bool_constants(model.graph))
    return {o.name: reached[o.name] for o in model.graph.output if o.name in reached}


def _reached(graph: onnx.GraphProto, unmatched: set[Key], outer: dict[str, str],
             constants: dict[str, bool]) -> dict[str, str]:
    """Every value of ``graph`` (nodes in order) that an unmatched random node reaches, with
    the node as a reason; a node with subgraphs is reached where anything in them is."""
    reached = dict(outer)
    for node in graph.node:
        reason = None
        if _is_random(node, constants) and node_key(node) in unmatched:
            reason = f"{node.op_type} ({node.name or node.output[0]})"
        else:
            reason = next((reached[i] for i in node.input if i in reached), None)
        for body in _subgraphs(node) if reason is None else ():
            inner = _reached(body, unmatched, reached, constants)
            reason = next((r for name, r in inner.items() if name not in reached), None)
            if reason is not None:
                break
        if reason is not None:
            for name in node.output:
                if name:
                    reached[name] = reason
    return reached


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for a in node.attribute for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)]


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for body in _subgraphs(node):
            yield from _all_nodes(body)


def _bool_constants(graph: onnx.GraphProto) -> dict[str, bool]:
    """Scalar initializers and ``Constant`` values read as booleans (a Dropout's training
    mode, when it is a constant)."""
    tensors = [(t.name, t) for t in graph.initializer]
    tensors += [(n.output[0], a.t) for n in _all_nodes(graph) if n.op_type == "Constant"
                for a in n.attribute if a.name == "value"]
    out = {}
    for name, t in tensors:
        if not t.dims or list(t.dims) == [1]:
            try:
                out[name] = bool(numpy_helper.to_array(t).reshape(-1)[0])
            except (ValueError, TypeError, IndexError):
                continue
    return out
