"""Verification runs a decode step where the optimized model switches kernels by query length
(verification/decode_run.py): the decode branch of a switched attention node is compared,
and a wrong decode branch fails verification."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnxopt.api import optimize
from onnxopt.verification.compare import verify_models
from onnxopt.verification.decode_run import (
    DECODE_PAST,
    SWITCH_QUERIES,
    SWITCH_QUERY_DIM,
    DecodeStep,
    decode_sizes,
    decode_step,
)

ROOT = Path(__file__).resolve().parents[2]
WITH_PAST = ROOT / "models" / "with_past"
GPT2 = WITH_PAST / "gpt2_with_past.ts.onnx"
LLAMA = WITH_PAST / "llama_with_past.dynamo.onnx"


@pytest.fixture(scope="module")
def switched():
    cache: dict = {}

    def get(path: Path) -> onnx.ModelProto:
        if path not in cache:
            # a prompt long enough for causal blocks: the attention switches on the query length
            cache[path] = optimize(str(path), target="cpu",
                                   workload=("prefill:seq=512", "decode"))
        return cache[path]

    return get


def _switches(proto: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in proto.graph.node if n.op_type == "If"
            and any(p.key == SWITCH_QUERIES for p in n.metadata_props)]


def _corrupt_decode_branch(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose first switch's few-query branch scales its first output by 1.01: wrong in
    a decode step only."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    switch = _switches(copy)[0]
    branch = next(a.g for a in switch.attribute if a.name == "then_branch")
    out = branch.output[0]
    scaled = out.name + "/corrupted"
    branch.node.append(helper.make_node(
        "Constant", [], [scaled + "/scale"],
        value=numpy_helper.from_array(np.array(1.01, np.float32))))
    branch.node.append(helper.make_node("Mul", [out.name, scaled + "/scale"], [scaled]))
    out.name = scaled
    return copy


@pytest.mark.parametrize("path", [GPT2, LLAMA])
def test_a_switched_model_is_verified_at_one_query_after_a_cache(switched, path):
    proto = switched(path)
    assert decode_step(proto) == DecodeStep(1, "seq")
    report = verify_models(str(path), proto)
    assert report.ok and report.decode_run_skipped is None
    step = report.runs[-1]
    assert step["input_ids"] == (2, 1)
    assert step["attention_mask"] == (2, DECODE_PAST + 1)
    assert step["past_key_values.0.key"][2] == DECODE_PAST
    # Every other run has more queries: the prefill branch.
    assert all(run["input_ids"][1] > 1 for run in report.runs[:-1])


@pytest.mark.parametrize("path", [GPT2, LLAMA])
def test_a_wrong_decode_branch_fails_verification(switched, path):
    wrong = _corrupt_decode_branch(switched(path))
    report = verify_models(str(path), wrong)
    assert not report.ok
    assert [o.name for o in report.outputs if not o.ok]
    # The same file without the switch's threshold: the runs at 7, 16, 29 queries take the
    # prefill branch alone, so the wrong branch passes unseen (what the decode run is for).
    unmarked = onnx.ModelProto()
    unmarked.CopyFrom(wrong)
    for node in _switches(unmarked):
        kept = [p for p in node.metadata_props if p.key not in (SWITCH_QUERIES, SWITCH_QUERY_DIM)]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    assert decode_step(unmarked) is None
    assert verify_models(str(path), unmarked).ok


def test_decode_sizes_solve_the_query_length_and_prefer_a_long_past():
    step = DecodeStep(1, "seq")
    sizes, why = decode_sizes(step, ["past_seq", "seq", "total_seq"], {})
    assert why is None
    assert sizes[0] == {"past_seq": DECODE_PAST, "seq": 1, "total_seq": DECODE_PAST}
    assert {"past_seq": DECODE_PAST, "seq": 1, "total_seq": DECODE_PAST + 1} in sizes
    assert all(s["seq"] == 1 for s in sizes)
    # A query length that is the mask's length less the cache's.
    sizes, _ = decode_sizes(DecodeStep(1, "(total-past)"), ["past", "total"], {})
    assert sizes == [{"past": DECODE_PAST, "total": DECODE_PAST + 1}]


def test_no_decode_run_where_the_query_length_is_fixed_or_unknown():
    assert decode_sizes(DecodeStep(1, "seq"), ["past", "seq"], {"seq": 16}) == (
        [], ("no sizes of the inputs' lengths (past, seq; --shape fixes seq) make its query "
             "length seq 1"))
    assert decode_sizes(DecodeStep(1, None), ["seq"], {}) == (
        [], "the switch does not say which input dim is its query length")


def test_a_pinned_query_length_skips_the_decode_run_saying_so(switched):
    report = verify_models(str(GPT2), switched(GPT2), shapes={"seq": (16,)})
    assert report.ok
    assert report.decode_run_skipped == ("no sizes of the inputs' lengths (past_seq, seq, "
                                         "total_seq; --shape fixes seq) make its query length "
                                         "seq 1")
    assert any(line.startswith("decode-step run skipped") for line in report.notes())
