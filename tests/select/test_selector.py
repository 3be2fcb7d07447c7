"""The selector on synthetic registries: exact rejection reasons, deterministic ties, fallback,
and the tuning cache read back and honoured."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from onnxopt import select
from onnxopt.importer import import_model
from onnxopt.legality.target import Target, run_target
from onnxopt.options import OptimizeOptions
from onnxopt.refusal import refusal
from onnxopt.select import tuning
from onnxopt.select.kernel import CUDA, Kernel
from onnxopt.select.selector import select_kernel
from onnxopt.select.shapes import Binding

ATTENTION = """
g (float[B,4,S,8] q, float[B,2,S,8] k, float[B,2,S,8] v, float[B,1,S,S] m) => (float[B,4,S,8] o) {
  o = ai.onnxopt.AttentionFused <num_heads=4, kv_num_heads=2, scale=0.35, head_size=8,
        causal=1, mask_kind="causal"> (q, k, v, m)
}"""

GELU = """
g (float[B,S,16] x) => (float[B,S,16] y) {
  y = ai.onnxopt.GeluFused <approximate="none"> (x)
}"""


def fake(name: str, **caps) -> Kernel:
    caps.setdefault("implements", "AttentionFused")
    return Kernel(name=name, backend="ort", emit=_identity, **caps)


def _identity(b, node, attrs, target):
    return [b.op("Identity", node.inputs[0])]


@pytest.fixture
def node(make_model):
    def build(text: str = ATTENTION, opset: int = 18):
        model = import_model(make_model(text, opset=opset, extra_opsets={"ai.onnxopt": 1}))
        return model, next(iter(model.graph))
    return build


CPU_TARGET = Target(device="cpu", ort_version=(1, 31), opset=18)


@pytest.mark.parametrize("caps,target,code,reason", [
    ({"providers": CUDA}, CPU_TARGET, "provider_not_supported", "runs only on CUDA"),
    ({"dtypes": frozenset({"float16"})}, CPU_TARGET, "dtype_not_supported",
     "does not support dtype float32"),
    ({"cpu_dtypes": frozenset({"float16"})}, CPU_TARGET, "dtype_not_on_cpu",
     "has no float32 implementation on CPU (only float16)"),
    ({"min_opset": 23}, dataclasses.replace(CPU_TARGET, opset=23), "model_opset_too_old",
     "needs opset 23; the model imports opset 18"),
    ({"min_opset": 18}, dataclasses.replace(CPU_TARGET, opset=17), "target_opset_too_old",
     "needs opset 18; the target allows opset 17"),
    ({"min_ort": (1, 40)}, CPU_TARGET, "ort_too_old", "needs ONNX Runtime 1.40, target is 1.31"),
    ({"providers": CUDA, "min_compute_capability": (9, 0)},
     Target(device="cuda", compute_capability=(8, 0)), "compute_capability_too_low",
     "needs compute capability 9.0"),
    ({"head_dims": frozenset({64, 128})}, CPU_TARGET, "head_size_not_supported",
     "head size 8 not in [64, 128]"),
    ({"causal": False}, CPU_TARGET, "causal_not_supported", "does not support causal masking"),
    ({"grouped_query": False}, CPU_TARGET, "grouped_query_not_supported",
     "does not support grouped-query attention"),
    ({"deterministic": False}, dataclasses.replace(CPU_TARGET, determinism="strict"),
     "not_deterministic", "is not deterministic and determinism is strict"),
    ({"requires": lambda n, a, t: refusal("unwelcome", f"%{n.inputs[0].name} is not welcome")},
     CPU_TARGET, "unwelcome", "%q is not welcome"),
])
def test_a_missing_capability_is_the_exact_reason(node, caps, target, code, reason):
    _, n = node()
    registry = [fake("x.under_test", **caps), fake("x.fallback")]
    selection = select_kernel(n, target, registry, model_opset=18)
    assert selection.chosen.name == "x.fallback"
    assert {k.name: str(r) for k, r in selection.rejected} == {"x.under_test": reason}
    assert {k.name: r.code for k, r in selection.rejected} == {"x.under_test": code}


def test_ties_break_by_name_whatever_the_registry_order(node):
    _, n = node()
    registry = [fake(name, cost=1.0) for name in ("b.two", "a.one", "c.three")]
    for _ in range(5):
        random.shuffle(registry)
        selection = select_kernel(n, CPU_TARGET, registry)
        assert selection.chosen.name == "a.one"
        assert [k.name for k, _ in selection.rejected] == ["b.two", "c.three"]
    assert {k.name: str(r) for k, r in selection.rejected}["b.two"] == (
        "estimated 1.00x the decomposition; a.one 1.00x the decomposition")


def test_costs_rank_before_names(node):
    _, n = node()
    registry = [fake("a.slow", cost=2.0), fake("z.fast", cost=0.5)]
    assert select_kernel(n, CPU_TARGET, registry).chosen.name == "z.fast"
    measured = select_kernel(n, CPU_TARGET, registry, {"a.slow": 0.1, "z.fast": 0.3}, unit="ms")
    assert measured.chosen.name == "a.slow"
    assert {k.name: str(r) for k, r in measured.rejected}["z.fast"] == (
        "measured 0.3 ms; a.slow 0.1 ms")


def _select(model, options: OptimizeOptions, registry):
    """Stage 6 alone, for the target a run with ``options`` has."""
    return select.run(model, options, run_target(options, model.opset), registry=registry)


def test_nothing_legal_falls_back_to_the_decomposition(node):
    model, _n = node()
    report = _select(model, OptimizeOptions(target="cpu"),
                        registry=[fake("x.cuda_only", providers=CUDA)])
    (selection,) = report.selections
    assert selection.chosen.name == "decompose.AttentionFused"
    assert selection.basis == "fallback"
    assert [(k.name, str(r)) for k, r in selection.rejected] == [
        ("x.cuda_only", "runs only on CUDA")]
    assert [r.code for _, r in selection.rejected] == ["provider_not_supported"]
    assert {n.op_type for n in model.graph} >= {"MatMul", "Softmax"}


def test_the_stage_adds_a_kernels_opset_imports(node):
    model, _ = node(GELU)
    gelu = fake("x.ms", implements="GeluFused", opsets={"com.microsoft": 1, "x.custom": 3})
    _select(model, OptimizeOptions(target="cpu"), registry=[gelu])
    assert model.opset_imports["com.microsoft"] == 1 and model.opset_imports["x.custom"] == 3


# ----------------------------------------------------------------------------- tuning


def _tuning_registry():
    # two real, equivalent GELU emitters with opposite priors
    from onnxopt.select.registry import default_registry

    by_name = {k.name: k for k in default_registry()}
    return [dataclasses.replace(by_name["ort.Gelu"], cost=0.1), by_name["decompose.GeluFused"]]


def test_tune_times_candidates_and_writes_the_cache(node, tmp_path):
    model, _n = node(GELU)
    cache = tmp_path / "tuning.json"
    report = _select(model, OptimizeOptions(target="cpu", tune=True, tune_cache=str(cache)),
                        registry=_tuning_registry())
    (selection,) = report.selections
    assert selection.basis == "tuned" and selection.unit == "ms"
    assert set(selection.costs) == {"ort.Gelu", "decompose.GeluFused"}
    entries = json.loads(cache.read_text())["entries"]
    (key,) = entries
    assert key.startswith("GeluFused|approximate=none|float32[1, 128, 16]|")
    assert "|CPUExecutionProvider|ort " in key and key.endswith(tuning.machine_id())
    assert set(entries[key]["times_ms"]) == {"ort.Gelu", "decompose.GeluFused"}
    (reason,) = [str(r) for _, r in selection.rejected]
    assert reason.startswith("measured ") and " ms; " in reason


def test_the_cache_is_read_back_and_honoured(node, tmp_path, monkeypatch):
    model, n = node(GELU)
    target = run_target(OptimizeOptions(target="cpu"), model.opset)
    import onnxruntime

    key = tuning.cache_key(tuning.signature(n, Binding.for_model(model)), target,
                           onnxruntime.__version__)
    cache = tmp_path / "shared.json"
    # A decision this machine would not make (the decomposition "faster"): it must be obeyed.
    cache.write_text(json.dumps({"format": 1, "entries": {key: {
        "times_ms": {"ort.Gelu": 0.5, "decompose.GeluFused": 0.2}, "failed": {}}}}))

    def no_timing(*args, **kwargs):
        raise AssertionError("a cached signature must not be timed again")

    monkeypatch.setattr(tuning, "measure", no_timing)
    for tune in (True, False):  # --tune reuses it; --tune-cache alone only reads it
        model, _ = node(GELU)
        report = _select(model, OptimizeOptions(target="cpu", tune=tune,
                                                   tune_cache=str(cache)),
                            registry=_tuning_registry())
        (selection,) = report.selections
        assert selection.chosen.name == "decompose.GeluFused" and selection.basis == "tuned"
        assert {k.name: str(r) for k, r in selection.rejected}["ort.Gelu"] == (
            "measured 0.5 ms; decompose.GeluFused 0.2 ms")
        assert report.tuned == 0


def test_a_cache_without_tune_is_not_extended(node, tmp_path, monkeypatch):
    model, _ = node(GELU)
    monkeypatch.setattr(tuning, "measure", lambda *a, **k: pytest.fail("timed without --tune"))
    cache = tmp_path / "empty.json"
    report = _select(model, OptimizeOptions(target="cpu", tune_cache=str(cache)),
                        registry=_tuning_registry())
    assert report.selections[0].basis == "cost model"
    assert not cache.exists()


def test_measured_near_ties_are_decided_by_the_cost_model(node):
    _, n = node()
    registry = [fake("a.fast", cost=2.0), fake("b.close", cost=0.5), fake("c.slow", cost=0.1)]
    times = {"a.fast": 1.00, "b.close": 1.02, "c.slow": 1.20}
    selection = select_kernel(n, CPU_TARGET, registry, times, unit="ms", tolerance=0.03,
                              prior={"a.fast": 2.0, "b.close": 0.5, "c.slow": 0.1})
    assert selection.chosen.name == "b.close"  # within 3% of the fastest, and cheaper a priori
    reasons = {k.name: str(r) for k, r in selection.rejected}
    assert reasons["a.fast"] == ("measured 1 ms; b.close 1.02 ms (within 3%: a tie, decided by "
                                 "the cost model, 2.00x against 0.50x)")
    assert reasons["c.slow"] == "measured 1.2 ms; b.close 1.02 ms"
