"""The fused op as a typed contract: one attribute record per op (defaults, types, reading a node),
ports the builder checks, and an attribute added as one field reaching a kernel's emitted node."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from onnxopt import select
from onnxopt.importer import import_model
from onnxopt.ir.builder import FUSED_DOMAIN, NodeBuilder, SchemaError
from onnxopt.legality.target import run_target
from onnxopt.ops import (
    FUSED_OPS,
    AttentionAttrs,
    FusedAttrs,
    GroupNormAttrs,
    LayerNormAttrs,
    MaskKind,
    RMSNormAttrs,
    attributes_of,
)
from onnxopt.ops.attention import ATTENTION
from onnxopt.options import OptimizeOptions
from onnxopt.refusal import refusal
from onnxopt.select.kernel import Backend, Kernel

QKV = """
g (float[B,4,S,8] q, float[B,4,S,8] k, float[B,4,S,8] v) => (float[B,4,S,8] o) {
  o = Identity(q)
}"""

FUSED = """
g (float[B,4,S,8] q, float[B,4,S,8] k, float[B,4,S,8] v, float[B,S,16] x) =>
  (float[B,4,S,8] o, float[B,S,16] y, float[B,S,16] z) {
  o = ai.onnxopt.AttentionFused <num_heads=4, causal=1, mask_kind="causal"> (q, k, v)
  y = ai.onnxopt.LayerNormFused (x)
  z = ai.onnxopt.RMSNormFused <has_residual=1> (x, , x)
}"""


@pytest.fixture
def graph_of(make_model):
    def build(text: str):
        model = import_model(make_model(text, extra_opsets={FUSED_DOMAIN: 1}))
        return model, {n.op_type: n for n in model.graph}
    return build


# --- records -------------------------------------------------------------------------------------


def test_a_record_reads_a_node_and_fills_in_its_defaults(graph_of):
    _, nodes = graph_of(FUSED)
    attention = attributes_of(nodes["AttentionFused"])
    assert attention == AttentionAttrs(num_heads=4, causal=True, mask_kind=MaskKind.CAUSAL)
    assert attention.scale == 1.0 and attention.kv_heads == 4 and not attention.grouped_query
    assert attributes_of(nodes["LayerNormFused"]) == LayerNormAttrs()
    assert attributes_of(nodes["LayerNormFused"]).epsilon == 1e-5
    rms = attributes_of(nodes["RMSNormFused"])
    assert isinstance(rms, RMSNormAttrs) and rms.epsilon == 1e-6 and rms.has_residual is True


def test_records_are_type_checked():
    with pytest.raises(TypeError, match="num_heads must be int"):
        AttentionAttrs(num_heads="4")
    with pytest.raises(TypeError, match="causal must be bool"):
        AttentionAttrs(causal=1)
    with pytest.raises(TypeError, match="mask_kind must be MaskKind"):
        AttentionAttrs(mask_kind="causal")
    with pytest.raises(TypeError, match="unexpected keyword"):
        GroupNormAttrs(group=2)
    assert AttentionAttrs(scale=1).scale == 1.0 and isinstance(AttentionAttrs(scale=1).scale, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        AttentionAttrs().scale = 2.0  # type: ignore[misc]


def test_node_spellings_read_back_typed():
    """As a node stores them: flags as ints, the mask kind spelled, unknown names refused."""
    attrs = AttentionAttrs.from_attributes({"causal": 1, "mask_kind": "causal+key_padding"})
    assert attrs.causal is True and attrs.mask_kind == MaskKind.CAUSAL | MaskKind.KEY_PADDING
    with pytest.raises(TypeError, match=r"has no attributes \['stride'\]"):
        AttentionAttrs.from_attributes({"stride": 3})
    assert AttentionAttrs.from_attributes({"window": 3, "mask_kind": "causal+window"}) == \
        AttentionAttrs(window=3, mask_kind=MaskKind.CAUSAL | MaskKind.WINDOW)


def test_a_node_states_its_whole_contract():
    """Every field is written, defaults included, in the node's spelling."""
    assert GroupNormAttrs(groups=4).as_attributes() == {"groups": 4, "epsilon": 1e-5,
                                                         "activation": ""}
    assert AttentionAttrs(causal=True, mask_kind=MaskKind.CAUSAL).as_attributes() == {
        "num_heads": 0, "kv_num_heads": 0, "scale": 1.0, "causal": 1, "mask_kind": "causal",
        "nan_to_zero": 0, "softcap": 0.0, "head_size": 0, "window": 0,
        "mask_fill": 0.0}


def test_every_op_has_a_record_and_named_ports():
    for name, op in FUSED_OPS.items():
        assert issubclass(op.attrs, FusedAttrs) and op.attrs is not FusedAttrs, name
        assert op.inputs and not op.inputs[0].optional, name
        assert op.decompose is not None and op.reference is not None, name
    assert ATTENTION.index("key_padding_mask") == 4
    with pytest.raises(KeyError, match="no input 'bias'"):
        ATTENTION.index("bias")


# --- the builder's schema check ------------------------------------------------------------------


def test_the_builder_checks_ports_and_records(graph_of):
    model, _ = graph_of(QKV)
    q, k, v = model.graph.inputs
    b = NodeBuilder(model.graph, None, "test", schemas=FUSED_OPS)
    with pytest.raises(SchemaError, match=r"required input 2 \(V\) is missing"):
        b.fused("AttentionFused", q, k, attrs=AttentionAttrs())
    with pytest.raises(SchemaError, match="6 inputs, the schema declares 5"):
        b.fused("AttentionFused", q, k, v, None, None, q, attrs=AttentionAttrs())
    with pytest.raises(SchemaError, match="attributes are a AttentionAttrs, got a GroupNormAttrs"):
        b.fused("AttentionFused", q, k, v, attrs=GroupNormAttrs())
    with pytest.raises(SchemaError, match="3 outputs, the schema declares 2"):
        b.fused("AttentionFused", q, k, v, outputs=3, attrs=AttentionAttrs())
    out = b.fused("AttentionFused", q, k, v, attrs=AttentionAttrs(num_heads=4, scale=0.5))
    assert attributes_of(out.producer) == AttentionAttrs(num_heads=4, scale=0.5)


# --- adding an attribute -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowedAttentionAttrs(AttentionAttrs):
    """AttentionFused with one attribute more: a key stride (0: none)."""

    stride: int = 0


def _windowed_kernel(seen: list) -> Kernel:
    def requires(node, attrs, target):
        seen.append(attrs)
        return refusal("stride_too_wide", f"a stride of {attrs.stride}") if attrs.stride > 8 \
            else None

    def emit(b, node, attrs, target):
        return [b.op("WindowedAttention", *node.inputs[:3], domain="test.windowed",
                     window=attrs.stride, scale=attrs.scale)]

    return Kernel(name="test.windowed", implements="AttentionFused", backend=Backend.ORT,
                  emit=emit, requires=requires, cost=0.1)


@pytest.mark.parametrize("window", [3, 9])
def test_a_new_attribute_is_one_field_and_reaches_the_emitted_node(graph_of, monkeypatch,
                                                                    window):
    """The field is declared once (the subclass); the rule's builder writes it, selection reads
    it into the record every kernel's requires and emit receive, and the emitted node has it.
    Nothing else names it."""
    model, _ = graph_of(QKV)
    q, k, v = model.graph.inputs
    with pytest.raises(SchemaError, match=r"attributes \['stride'\] are not in its schema"):
        NodeBuilder(model.graph, None, "rule", schemas=FUSED_OPS).fused(
            "AttentionFused", q, k, v, attrs=WindowedAttentionAttrs(stride=window))

    monkeypatch.setitem(FUSED_OPS, "AttentionFused",
                        dataclasses.replace(ATTENTION, attrs=WindowedAttentionAttrs))
    b = NodeBuilder(model.graph, model.graph.outputs[0].producer, "rule", schemas=FUSED_OPS)
    fused = b.fused("AttentionFused", q, k, v,
                    attrs=WindowedAttentionAttrs(num_heads=4, scale=0.5, stride=window))
    model.graph.set_inputs(model.graph.outputs[0].producer, [fused])

    seen: list = []
    options = OptimizeOptions(target="cpu")
    report = select.run(model, options, run_target(options, model.opset),
                        registry=[_windowed_kernel(seen)])
    assert set(seen) == {WindowedAttentionAttrs(num_heads=4, scale=0.5, stride=window)}
    (selection,) = report.selections
    if window > 8:  # the kernel refused on the new field; the decomposition took the node
        assert selection.chosen.name == "decompose.AttentionFused"
        assert [(r.code, str(r)) for _, r in selection.rejected] == [
            ("stride_too_wide", "a stride of 9")]
        return
    (emitted,) = [n for n in model.graph if n.op_type == "WindowedAttention"]
    assert emitted.attr("window") == window and emitted.attr("scale") == 0.5


# --- one place reads them ------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_no_fused_node_attribute_is_read_outside_the_records(models_dir, monkeypatch, target):
    """Rules, selection, kernels, decompositions and the cost model read a fused node's
    attributes through its record (``FusedAttrs.of``) and nowhere else: every ``Node.attr``
    call on an ``ai.onnxopt`` node while whole models are optimized comes from the record."""
    from onnxopt.ir.node import Node
    from onnxopt.ops import base
    from onnxopt.pipeline import run_pipeline

    plain_attr = Node.attr
    readers: set[str] = set()

    def watched(self, name, default=None):
        if self.domain == FUSED_DOMAIN:
            caller = sys._getframe(1).f_code
            if caller.co_filename != base.__file__:
                readers.add(f"{Path(caller.co_filename).name}:{caller.co_name} read {name}")
        return plain_attr(self, name, default)

    monkeypatch.setattr(Node, "attr", watched)
    for name in ("llama.dynamo", "gpt2.ts", "diffusion.ts", "gemma2.dynamo"):
        result = run_pipeline(str(models_dir / f"{name}.onnx"), OptimizeOptions(target=target))
        assert result.report.stages["select"].selections
    assert not readers
