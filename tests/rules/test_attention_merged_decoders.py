"""Attention in both branches of real merged decoders (``models/other/merged/merged_*.onnx``).

Each file is a GPT-2 or LLaMA (GQA 4/2) decoder exported twice by one PyTorch exporter
(TorchScript or dynamo) — the prompt step without a cache and the step with one — and merged
the way Optimum merges them (``models/merge_decoders.py``): an ``If(use_cache_branch)`` whose
then-branch is the with-past graph and else-branch the no-past graph, weights shared at the
top level. Every attention block of both branches must fuse, and the optimized model must
compute what the original does whichever branch runs.

The issue's no-cache branch reshaped the repeated K and V to the *mask's* length
(``total_sequence``), which equals ``sequence`` only inside that branch (no past); the real
exports here take it from ``input_ids``, so the test spells it the issue's way on a real
export as well: a Reshape keeps its element count, so the repeated K is K's length whatever
the target calls it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from onnxopt import normalize
from onnxopt.fuse import fuse
from onnxopt.importer import import_model
from onnxopt.legality.target import Target
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.rules import all_rules

OTHER = Path(__file__).resolve().parents[2] / "models" / "other" / "merged"
MERGED = ["merged_gpt2.ts", "merged_gpt2.dynamo", "merged_llama.ts", "merged_llama.dynamo"]
LAYERS = 2


def _fused_per_branch(proto: onnx.ModelProto):
    """(AttentionFused nodes per If branch, attention regions of the fusion report) after
    normalize + fuse with every rule."""
    model = import_model(proto)
    normalize.run(model, OptimizeOptions())
    report = fuse(model, all_rules(), Target(), debug=True)
    counts = {g.name: sum(1 for n in g if n.op_type == "AttentionFused")
              for g in model.graph.all_graphs() if g.parent is not None}
    return counts, [r for r in report.regions if r.family == "attention"]


def _session(proto: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def _feeds(proto: onnx.ModelProto, flag: bool, batch: int, seq: int, past: int,
           left: int, right: int, seed: int) -> dict[str, np.ndarray]:
    """One step's inputs: the mask spans past + seq with ``left`` leading and ``right``
    trailing zeros in every row but the first; the no-cache branch gets past length 0."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in proto.graph.input:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(2, 200, (batch, seq), dtype=np.int64)
        elif vi.name == "attention_mask":
            mask = np.ones((batch, past + seq), np.int64)
            mask[1:, :left] = 0
            mask[1:, past + seq - right:] = 0
            feeds[vi.name] = mask
        elif vi.name == "use_cache_branch":
            feeds[vi.name] = np.array([flag])
        else:  # past_key_values.N.key/value [batch, kv heads, past, head dim]
            feeds[vi.name] = rng.standard_normal((batch, dims[1], past, dims[3]), np.float32)
    return feeds


# (use_cache_branch, batch, new tokens, past, left padding, right padding): two lengths per
# branch, padding in the mask; the no-cache branch with past length 0.
CASES = [(True, 2, 1, 6, 2, 0), (True, 2, 3, 9, 0, 1), (True, 3, 1, 17, 5, 0),
         (False, 2, 5, 0, 0, 2), (False, 3, 12, 0, 3, 0), (False, 1, 7, 0, 0, 0)]


def _assert_equal_in_both_branches(original: onnx.ModelProto, optimized: onnx.ModelProto):
    want_s, got_s = _session(original), _session(optimized)
    for k, case in enumerate(CASES):
        feeds = _feeds(original, *case, seed=k)
        for name, w, g in zip([o.name for o in original.graph.output],
                              want_s.run(None, feeds), got_s.run(None, feeds)):
            assert w.shape == g.shape, (case, name)
            rel = float(np.abs(g - w).max()) / max(1.0, float(np.abs(w).max()))
            assert rel < 1e-4, (case, name, rel)


def _optimized(proto: onnx.ModelProto) -> onnx.ModelProto:
    return run_pipeline(proto, OptimizeOptions(target="cpu")).whole_proto()


@pytest.mark.parametrize("name", MERGED)
def test_every_attention_block_of_both_branches_fuses(name):
    counts, regions = _fused_per_branch(onnx.load(str(OTHER / f"{name}.onnx")))
    assert counts == {"with_past": LAYERS, "no_past": LAYERS}
    assert [r.status for r in regions] == ["fused"] * (2 * LAYERS), \
        [(r.code, r.detail) for r in regions]


@pytest.mark.parametrize("name", MERGED)
def test_outputs_equal_with_and_without_the_cache(name):
    original = onnx.load(str(OTHER / f"{name}.onnx"))
    _assert_equal_in_both_branches(original, _optimized(original))


def _no_past(proto: onnx.ModelProto) -> onnx.GraphProto:
    return next(a.g for a in proto.graph.node[0].attribute if a.name == "else_branch")


def _repeat_reshape_targets(branch: onnx.GraphProto) -> set[str]:
    """The targets of the Reshapes that merge a head repeat (Unsqueeze -> Expand -> Reshape)."""
    made = {o: n for n in branch.node for o in n.output}
    targets = set()
    for n in branch.node:
        src = made.get(n.input[0]) if n.op_type == "Reshape" else None
        if src is not None and src.op_type == "Expand" and \
                made.get(src.input[0], src).op_type == "Unsqueeze":
            targets.add(n.input[1])
    return targets


def test_a_repeat_reshaped_to_the_masks_length_fuses_in_the_no_cache_branch():
    """The issue's spelling on a real export: the no-cache branch's GQA repeat takes its key
    length from ``Shape(attention_mask)`` (``total_seq`` at the top level, ``seq`` inside the
    branch). It fuses, and the model still computes the same in both branches."""
    proto = onnx.load(str(OTHER / "merged_llama.dynamo.onnx"))
    branch = _no_past(proto)
    made = {o: n for n in branch.node for o in n.output}
    targets = _repeat_reshape_targets(branch)
    assert targets
    edited = 0
    for target in targets:
        concat = made[target]
        assert concat.op_type == "Concat"
        for i, part in enumerate(concat.input):
            shape = made.get(part)
            if shape is not None and shape.op_type == "Shape" and \
                    any(a.name == "start" and a.i == 1 for a in shape.attribute):
                name = f"{part}_from_mask"
                branch.node.insert(0, helper.make_node("Shape", ["attention_mask"], [name],
                                                       start=1, end=2))
                concat.input[i] = name
                edited += 1
    assert edited == len(targets)
    counts, regions = _fused_per_branch(proto)
    assert counts == {"with_past": LAYERS, "no_past": LAYERS}
    assert {r.status for r in regions} == {"fused"}
    _assert_equal_in_both_branches(proto, _optimized(proto))


def test_a_repeat_that_interleaves_heads_is_refused_in_the_no_cache_branch():
    """K unsqueezed on axis 1 instead of 2 (heads kv0, kv1, kv0, kv1 instead of kv0, kv0,
    kv1, kv1): a valid model, but not a grouped-query repeat, so that block keeps its
    refusal with the exact reason and the other three fuse."""
    proto = onnx.load(str(OTHER / "merged_llama.dynamo.onnx"))
    branch = _no_past(proto)
    made = {o: n for n in branch.node for o in n.output}
    reshape = next(n for n in branch.node if n.op_type == "Reshape"
                   and n.input[1] in _repeat_reshape_targets(branch))
    unsqueeze = made[made[reshape.input[0]].input[0]]
    branch.node.insert(0, helper.make_node("Constant", [], ["axis_one"],
                                           value=helper.make_tensor("a", 7, [1], [1])))
    unsqueeze.input[1] = "axis_one"
    counts, regions = _fused_per_branch(proto)
    assert counts == {"with_past": LAYERS, "no_past": LAYERS - 1}
    refused = [r for r in regions if r.status != "fused"]
    assert [(r.status, r.code) for r in refused] == [("refused", "repeat_not_on_heads")]
    assert refused[0].detail.endswith("is unsqueezed on axis [1], not 2: not a head repeat")
    _assert_equal_in_both_branches(proto, _optimized(proto))
