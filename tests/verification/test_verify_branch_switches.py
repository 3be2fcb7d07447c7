"""``--verify`` goes through both branches of an ``If`` switched by a one-element bool input
(a merged decoder's ``use_cache_branch``) and says so: the report lists the value the switch
took in each compared run, and a note says whether both branches were compared."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.verification import verify_models
from onnxopt.verification.compare import VerifyReport, _switches

OTHER = Path(__file__).resolve().parents[2] / "models" / "other" / "merged"


@pytest.mark.parametrize("name", ["merged_llama.dynamo", "merged_gpt2.ts"])
def test_verify_compares_both_branches_of_a_merged_decoder(name):
    path = str(OTHER / f"{name}.onnx")
    optimized = run_pipeline(path, OptimizeOptions(target="cpu")).whole_proto()
    report = verify_models(path, optimized, runs=2)
    assert report.ok
    values = report.switch_values()["use_cache_branch"]
    assert len(values) == report.compared_runs
    assert set(values) == {True, False}
    assert report.to_json()["switches"] == {"use_cache_branch": values}
    assert (f"use_cache_branch: both branches compared ({values.count(True)} runs true, "
            f"{values.count(False)} false)") in report.notes()


def test_a_switch_that_took_one_value_is_named_in_the_notes():
    report = VerifyReport(switches=[{"use_cache_branch": True}, {"use_cache_branch": True}])
    assert report.notes() == [("use_cache_branch: only True compared: the branches it "
                               "switches to when False were not run")]


def test_only_one_element_bool_inputs_are_switches():
    feeds = {"flag": np.array([False]), "mask": np.ones((2, 3), bool),
             "ids": np.array([1], np.int64), "scalar": np.array(True)}
    assert _switches(feeds) == {"flag": False, "scalar": True}


def test_a_model_without_switches_reports_none(make_model):
    proto = make_model("g (float[2] x) => (float[2] y) { y = Relu (x) }")
    report = verify_models(proto, onnx.ModelProto.FromString(proto.SerializeToString()), runs=2)
    assert report.ok and report.switch_values() == {} and report.to_json()["switches"] == {}
