"""Every ONNX node test that ONNX Runtime runs, optimized by onnxopt, must compute the same.

The cases are generated at test time from the installed onnx (as ``backend-test-tools
generate-data`` would write them), one test per case. Each is optimized through the file path
a user takes (``onnxopt.optimize(path, output=..., target="cpu")``), loaded and run in ONNX
Runtime, and compared with ORT's outputs for the original model. A case whose ORIGINAL ORT
cannot load or run is skipped with ORT's reason: there is nothing to compare against.

All cases run in CI: the whole module takes about 20 s on two cores (≈5 s of it building the
cases), so no slice is needed. ``benchmarks/node_suite.py --all`` runs the same cases and
prints the counts per class.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # independent of pytest's import mode

import node_cases

CASE_NAMES = [case.name for case in node_cases.ci_slice()]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_node_case_optimizes_to_the_same_function(name: str) -> None:
    result = node_cases.classify(node_cases.cases_by_name()[name])
    if result.status == "not_runnable":
        pytest.skip(f"ORT does not run the original: {result.detail}")
    assert result.status == "ok", f"{result.status}: {result.detail}"
