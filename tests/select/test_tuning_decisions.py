"""``--tune`` decides only what its timings can tell apart: a candidate replaces the default
(the cost model's choice) only when it is faster by more than the noise of both, so reruns on
a shared machine write the same file."""

from __future__ import annotations

import pytest

from onnxopt.select import tuning
from onnxopt.select.tuning import Timing, blocked, clearly_faster, decide

DEFAULT = "decompose.AttentionFused"


def noisy(median: float, spread: float) -> Timing:
    return Timing(median, median * (1 - spread), median * (1 + spread))


def test_quartiles_of_the_samples():
    t = Timing.of([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (t.fast, t.median, t.slow) == (2.0, 3.0, 4.0)
    assert Timing.of([0.7]) == Timing.exact(0.7) == Timing(0.7, 0.7, 0.7)


def test_noisy_but_equal_timings_keep_the_default():
    # Medians 8% apart, but the middle halves of the runs overlap: the order is noise.
    timings = {DEFAULT: noisy(0.22, 0.10), "ort.MultiHeadAttention": noisy(0.204, 0.10)}
    assert not clearly_faster(timings["ort.MultiHeadAttention"], timings[DEFAULT])
    assert decide(DEFAULT, timings, sorted(timings)) == DEFAULT


def test_a_clearly_faster_candidate_replaces_the_default():
    timings = {DEFAULT: noisy(0.30, 0.03), "ort.MultiHeadAttention": noisy(0.20, 0.03)}
    assert decide(DEFAULT, timings, sorted(timings)) == "ort.MultiHeadAttention"


def test_faster_by_less_than_the_margin_is_not_enough():
    # No spread at all (a cache entry of medians), 3% apart: within MARGIN.
    timings = {DEFAULT: Timing.exact(1.0), "x.fast": Timing.exact(0.97)}
    assert tuning.MARGIN > 0.03 and decide(DEFAULT, timings, ["x.fast"]) == DEFAULT


def test_of_two_equally_fast_challengers_the_first_in_the_given_order_stands():
    a, b = noisy(0.10, 0.05), noisy(0.098, 0.05)
    timings = {DEFAULT: noisy(0.30, 0.03), "a": a, "b": b}
    assert decide(DEFAULT, timings, ["a", "b"]) == "a"
    assert decide(DEFAULT, timings, ["b", "a"]) == "b"
    # ... and one clearly faster than the first challenger still wins
    timings["c"] = noisy(0.05, 0.05)
    assert decide(DEFAULT, timings, ["a", "b", "c"]) == "c"


def test_a_default_without_a_timing_stands():
    assert decide(DEFAULT, {"x": Timing.exact(0.01)}, ["x"]) == DEFAULT


def test_a_slow_stretch_that_hits_whole_rounds_cancels():
    # Another process slows rounds 2-5 threefold; within each round "fast" is 0.8x "slow".
    load = [1, 1, 3, 3, 3, 3, 1, 1, 1, 1]
    samples = {"slow": [1.0 * f for f in load], "fast": [0.8 * f for f in load]}
    raw = {n: Timing.of(s) for n, s in samples.items()}
    assert not clearly_faster(raw["fast"], raw["slow"])  # the load swamps the difference
    fair = {n: Timing.of(s) for n, s in blocked(samples).items()}
    assert clearly_faster(fair["fast"], fair["slow"])
    # in the scale of the median round (an unloaded one here): milliseconds as measured
    assert fair["slow"].median == pytest.approx(1.0) and fair["fast"].median == pytest.approx(0.8)


def test_timings_at_two_lengths_combine_by_geometric_mean():
    both = Timing(1.0, 0.5, 2.0).combined(Timing(4.0, 2.0, 8.0))
    assert (both.median, both.fast, both.slow) == (2.0, 1.0, 4.0)


def test_the_cache_keeps_the_spread_and_reads_old_entries_as_exact(tmp_path):
    cache = tuning.TuningCache(str(tmp_path / "t.json"))
    cache.put("k", {"a": Timing(1.0, 0.9, 1.2)}, {}, runs=30)
    cache.entries["old"] = {"times_ms": {"a": 0.5}, "failed": {}}
    cache.save()
    again = tuning.TuningCache(str(tmp_path / "t.json"))
    assert again.timings("k") == {"a": Timing(1.0, 0.9, 1.2)}
    assert again.timings("old") == {"a": Timing.exact(0.5)}


def _kernels(*names: str):
    from onnxopt.select.registry import default_registry

    by_name = {k.name: k for k in default_registry()}
    return [by_name[n] for n in names]


def test_the_selection_names_the_default_kept_and_the_noise_it_was_within():
    from onnxopt.select.selector import Selection

    default, mha, lean = _kernels(DEFAULT, "ort.MultiHeadAttention", "decompose.AttentionFused.lean")
    untuned = Selection("attn", "AttentionFused", default, [(lean, "would emit the plain one")],
                        costs={DEFAULT: 1.0, mha.name: 1.12})
    timings = {DEFAULT: Timing(0.22, 0.20, 0.24), mha.name: Timing(0.21, 0.19, 0.23)}
    chosen = tuning.tuned_selection(untuned, [default, mha], timings)
    assert chosen.chosen is default and chosen.basis == "tuned" and chosen.unit == "ms"
    assert chosen.costs == {DEFAULT: 0.22, mha.name: 0.21}
    assert {k.name: str(why) for k, why in chosen.rejected} == {
        lean.name: "would emit the plain one",
        mha.name: ("measured 0.21 ms; decompose.AttentionFused 0.22 ms (within the noise: the "
                   "middle halves of the runs, 0.19-0.23 ms against 0.2-0.24 ms, are not 10% "
                   "apart)")}
    timings[mha.name] = Timing(0.11, 0.10, 0.12)
    chosen = tuning.tuned_selection(untuned, [default, mha], timings)
    assert chosen.chosen is mha
    assert {k.name: str(why) for k, why in chosen.rejected}[DEFAULT] == (
        "measured 0.22 ms; ort.MultiHeadAttention 0.11 ms")
    # a second measurement that does not find it clearly faster too keeps the default
    equal = {DEFAULT: Timing(0.22, 0.21, 0.23), mha.name: Timing(0.22, 0.21, 0.23)}
    kept = tuning.tuned_selection(untuned, [default, mha], timings, equal)
    assert kept.chosen is default
    (why,) = [why for k, why in kept.rejected if k is mha]
    assert why.code == "not_confirmed" and str(why) == (
        "measured 0.11 ms; decompose.AttentionFused 0.22 ms (clearly faster in one "
        "measurement, not in a second: 0.22 ms against 0.22 ms)")
    faster = {DEFAULT: Timing(0.22, 0.21, 0.23), mha.name: Timing(0.12, 0.11, 0.13)}
    assert tuning.tuned_selection(untuned, [default, mha], timings, faster).chosen is mha


@pytest.mark.slow
def test_ten_tuned_runs_write_the_same_bytes(models_dir, tmp_path, cli):
    """Each run with a fresh cache, so each one times every candidate again. In this LLaMA the
    residual RMSNorms have an ORT kernel clearly faster than the default (taken every time);
    the attention and SwiGLU candidates are slower than theirs or within its noise (never
    taken)."""
    written = set()
    for i in range(10):
        out = tmp_path / f"o{i}.onnx"
        code, _, err = cli("optimize", models_dir / "llama.dynamo.onnx", "-o", out,
                           "--target", "cpu", "--tune", "--tune-cache", tmp_path / f"c{i}.json",
                           "-q")
        assert code == 0, err
        written.add(out.read_bytes())
    assert len(written) == 1
