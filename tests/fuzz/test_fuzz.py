"""The fuzz suite's fixed-seed CI slice, and checks of the fuzzer itself.

Why: ``benchmarks/fuzz.py`` runs tens of thousands of cases; CI runs a fixed,
reproducible slice of the same cases (mutants of every seed model, and generated
graphs) through the same worker pool and oracle, so a regression on any of them
fails the build with the case's recipe and a command that rebuilds it. The
fuzzer's own parts are tested too: mutation operators never touch their input,
and every generated graph is valid (checker + ONNX Runtime), property-style with
hypothesis.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz import cases, generate, mutations, seeds
from fuzz.harness import Outcome
from fuzz.pool import Pool

CI_SEED = 20240611
CI_MUTANTS = 500
CI_GENERATED = 150
JOBS = 2


def describe(o: Outcome) -> str:
    recipe = json.dumps(o.recipe)
    return (f"{o.case_id} [{o.verdict}] {o.signature}\n    origin: {o.origin}\n"
            f"    message: {o.message}\n    detail: {o.detail.strip()[-300:]}\n"
            f"    rebuild: python benchmarks/fuzz.py --replay '{recipe}' "
            f"--save /tmp/fuzz_case.onnx")


@pytest.fixture(scope="module")
def ci_outcomes() -> list[Outcome]:
    recipes = cases.mix(CI_MUTANTS, CI_GENERATED, CI_SEED, seeds.seed_names())
    with Pool(JOBS) as pool:
        return list(pool.run(recipes))


def test_ci_slice_ran_every_case(ci_outcomes: list[Outcome]) -> None:
    assert len(ci_outcomes) == CI_MUTANTS + CI_GENERATED
    skipped = [o for o in ci_outcomes if o.verdict == "skipped"]
    assert len(skipped) <= 2, "\n".join(describe(o) for o in skipped)
    assert sum(bool(o.ort_ran) for o in ci_outcomes) >= CI_GENERATED, \
        "too few cases ran in ONNX Runtime to check results"


@pytest.mark.parametrize("verdicts", [
    ("internal_error", "internal_warning", "crash", "traceback"),
    ("hang",),
    ("input_modified", "stray_files"),
    ("refused_valid",),
    ("broken_output",),
    ("wrong_result",),
], ids=["internal-error", "hang", "files", "refused-valid", "broken-output", "wrong-result"])
def test_ci_slice_has_no(ci_outcomes: list[Outcome], verdicts: tuple[str, ...]) -> None:
    bad = [o for o in ci_outcomes if set(o.verdicts or [o.verdict]) & set(verdicts)]
    if bad:
        pytest.fail(f"{len(bad)} of {len(ci_outcomes)} cases:\n"
                    + "\n".join(describe(o) for o in bad[:25]), pytrace=False)


@pytest.mark.parametrize("name", sorted(seeds.SYNTHESIZED))
def test_synthesized_seed_is_valid(name: str) -> None:
    assert generate.validate(seeds.load_seed(name)) == ""


@pytest.mark.parametrize("name", sorted(mutations.PROTO_MUTATIONS))
def test_proto_mutation_leaves_its_input_alone(name: str) -> None:
    for seed_name in ("control_flow", "mini_transformer", "cnn"):
        model = seeds.load_seed(seed_name)
        before = model.SerializeToString()
        for k in range(5):
            out = mutations.PROTO_MUTATIONS[name](model, random.Random(k))
            assert out is None or out is not model
        assert model.SerializeToString() == before


def test_mutants_replay_exactly() -> None:
    model = seeds.load_seed("mini_transformer")
    for k in range(30):
        data, steps = mutations.mutate(model, random.Random(k))
        assert mutations.replay(model, steps) == data


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_generated_graphs_are_valid(seed: int) -> None:
    gen, _ = generate.generate(seed)
    assert generate.validate(gen.model) == ""
    assert generate.MIN_OPSET <= gen.opset <= generate.MAX_OPSET
    assert 3 <= gen.model.ir_version <= 13
