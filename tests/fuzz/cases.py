"""Fuzz cases from recipes: small dicts that say how to rebuild a case exactly.

Why: the parent process only hands out recipes (seed model + case seed, or a
generator seed), so the expensive part — mutating a 1 MB model, generating and
validating a graph — runs in the workers, and every failure can be rebuilt from
its recipe alone (``mutations`` steps carry their own seeds).
"""

from __future__ import annotations

import random
from typing import Any

from onnx import ModelProto, TensorProto

from . import generate, mutations, seeds
from .harness import Case

EXTERNAL_NAME = "weights.bin"
EXTERNAL_CHANCE = 0.05


def mutant_recipe(seed_model: str, case_seed: int, index: int) -> dict[str, Any]:
    return {"kind": "mutant", "case_id": f"m{case_seed}-{index}", "seed_model": seed_model,
            "case_seed": case_seed + index * 7919}


def generated_recipe(gen_seed: int, index: int) -> dict[str, Any]:
    return {"kind": "generated", "case_id": f"g{gen_seed}-{index}",
            "gen_seed": gen_seed * 100_003 + index}


def mutant_case(recipe: dict[str, Any]) -> Case:
    """Mutate the seed model (or replay ``recipe['steps']``); sometimes move the weights of
    a still-parseable mutant to a valid external-data file."""
    model = seeds.load_seed(recipe["seed_model"])
    rng = random.Random(recipe["case_seed"])
    if "steps" in recipe:
        steps = [mutations.Step(n, s) for n, s in recipe["steps"]]
        data = mutations.replay(model, steps)
        if data is None:
            raise ValueError("the recorded steps no longer apply")
    else:
        data, steps = mutations.mutate(model, rng)
    external = recipe.get("external", rng.random() < EXTERNAL_CHANCE)
    extra: dict[str, bytes] = {}
    if external and all(s.name in mutations.PROTO_MUTATIONS for s in steps):
        proto = ModelProto()
        proto.ParseFromString(data)
        extra = {EXTERNAL_NAME: externalize(proto)}
        data = proto.SerializeToString()
    full = dict(recipe, steps=[[s.name, s.seed] for s in steps], external=bool(extra))
    label = ", ".join(f"{s.name}#{s.seed}" for s in steps) + (" + external data" if extra
                                                               else "")
    return Case(recipe["case_id"], data, f"mutant of {recipe['seed_model']}: {label}", full,
                extra)


def externalize(model: ModelProto, min_bytes: int = 256) -> bytes:
    """Move every raw initializer of at least ``min_bytes`` to one blob (valid external
    data: location, offset, length); return the blob."""
    blob = bytearray()
    for tensor in model.graph.initializer:
        if len(tensor.raw_data) < min_bytes:
            continue
        offset = len(blob)
        blob += tensor.raw_data
        blob += b"\x00" * (-len(blob) % 64)
        length = len(tensor.raw_data)
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in (("location", EXTERNAL_NAME), ("offset", str(offset)),
                           ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    return bytes(blob)


def generated_case(recipe: dict[str, Any]) -> Case:
    gen, rejected = generate.generate(recipe["gen_seed"])
    data = gen.model.SerializeToString()
    origin = (f"generated (seed {recipe['gen_seed']}, opset {gen.opset}, "
              f"{len(gen.model.graph.node)} nodes, {rejected} rejected first)")
    return Case(recipe["case_id"], data, origin, dict(recipe))


def bytes_recipe(case_id: str, data: bytes, origin: str,
                 extra_files: dict[str, bytes] | None = None) -> dict[str, Any]:
    return {"kind": "bytes", "case_id": case_id, "data": data, "origin": origin,
            "extra_files": extra_files or {}}


def mix(mutant_count: int, generated_count: int, seed: int, seed_models: list[str]
        ) -> list[dict[str, Any]]:
    """Recipes for ``mutant_count`` mutants spread round-robin over ``seed_models`` and
    ``generated_count`` generated graphs, interleaved."""
    mutants = [mutant_recipe(seed_models[i % len(seed_models)], seed, i)
               for i in range(mutant_count)]
    generated = [generated_recipe(seed, i) for i in range(generated_count)]
    out: list[dict[str, Any]] = []
    total = max(1, mutant_count + generated_count)
    gi = mi = 0
    for k in range(mutant_count + generated_count):
        want_generated = gi < generated_count and (mi >= mutant_count or
                                                   gi * total <= k * generated_count)
        if want_generated:
            out.append(generated[gi])
            gi += 1
        else:
            out.append(mutants[mi])
            mi += 1
    return out
