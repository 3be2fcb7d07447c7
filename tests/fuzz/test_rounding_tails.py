"""The fuzzer's ``rounding_tail`` mutation on every seed model: arithmetic on a constant, then
Floor, Round, a cast to int32, ArgMax or an equality, as a new output (issue 28). The value
it starts from is computed from the inputs and weights alone, so the new output must come out
of onnxopt bit for bit the same, whatever else in the model fuses."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnxopt
from fuzz import mutations, seeds
from fuzz.harness import ort_session, run_original

SEEDS = seeds.seed_names()


@pytest.mark.parametrize("seed_model", SEEDS)
def test_rounding_tail_is_bitwise(seed_model, tmp_path):
    model = seeds.load_seed(seed_model)
    ran = 0
    for case_seed in range(4):
        mutant = mutations.PROTO_MUTATIONS["rounding_tail"](model, random.Random(case_seed))
        if mutant is None:
            pytest.skip("no float value computed from the inputs alone")
        path = tmp_path / f"m{case_seed}.onnx"
        onnx.save(mutant, path)
        original = run_original(str(path), seed=1)
        if original is None:
            continue
        _sess, feeds, ref = original
        out = tmp_path / f"o{case_seed}.onnx"
        onnxopt.optimize(path, output=out, target="cpu")
        got = ort_session(str(out)).run([mutant.graph.output[-1].name], feeds)[0]
        assert np.array_equal(ref[-1], got), (seed_model, case_seed)
        ran += 1
    if not ran:
        pytest.skip("ONNX Runtime runs none of the mutants")
