"""Schema facts computed in the shape-inference child are the facts onnx gives.

Why: the importer's child sends the signatures and attribute defaults of the model's ops
back with the inferred types, so the parent never builds onnx's schema registry (10-15 ms of
every run). What it takes must be what a lookup in onnx would have said, at the model's
opset, or the importer would judge nodes against the wrong schema.
"""

from __future__ import annotations

import os

import onnx

from onnxopt.importer.build import _inferred_graph, import_model
from onnxopt.ir import schema_facts
from onnxopt.isolation import isolated


def test_facts_from_a_child_are_onnx_own(monkeypatch):
    monkeypatch.setattr(schema_facts, "_SIGNATURES", {})
    monkeypatch.setattr(schema_facts, "_DEFAULTS", {})
    ops = {"Softmax", "Unsqueeze", "Clip", "NoSuchOp"}
    facts = isolated(schema_facts.facts_for, ops, 11)
    schema_facts.take(facts)
    for op in ops:
        assert schema_facts._SIGNATURES[(op, 11)] == schema_facts._signature(op, 11)
        assert schema_facts._DEFAULTS[op] == schema_facts._attribute_defaults(op)
    assert schema_facts.signature("NoSuchOp", 11) is None
    assert schema_facts.attribute_defaults("Softmax") == {"axis": -1}  # the newest schema's
    assert schema_facts._SIGNATURES[("Unsqueeze", 11)][0] == {
        "axes": onnx.AttributeProto.INTS}  # an attribute at opset 11, an input since 13
    for op in schema_facts.WRITTEN_OPS:
        assert op in schema_facts._DEFAULTS


def test_a_fact_looked_up_here_is_kept(monkeypatch):
    monkeypatch.setattr(schema_facts, "_SIGNATURES", {("Relu", 14): "looked up here"})
    monkeypatch.setattr(schema_facts, "_DEFAULTS", {})
    schema_facts.take(({("Relu", 14): "from elsewhere", ("Abs", 14): "from elsewhere"}, {}))
    assert schema_facts._SIGNATURES == {("Relu", 14): "looked up here",
                                        ("Abs", 14): "from elsewhere"}


def test_the_importer_takes_the_facts_of_the_model_it_imports(models_dir, monkeypatch):
    monkeypatch.setattr(schema_facts, "_SIGNATURES", {})
    monkeypatch.setattr(schema_facts, "_DEFAULTS", {})
    parent = os.getpid()
    looked_up = []
    real = schema_facts._signature

    def counted(op_type, opset):
        if os.getpid() == parent:
            looked_up.append(op_type)
        return real(op_type, opset)

    monkeypatch.setattr(schema_facts, "_signature", counted)  # (forked children keep it too)
    path = models_dir / "gpt2.ts.onnx"
    import_model(str(path))
    proto = onnx.load(str(path), load_external_data=False)
    ops = {n.op_type for n in proto.graph.node}
    assert looked_up == []  # every signature the import read came from the child
    assert {op for (op, _) in schema_facts._SIGNATURES} >= ops
    _, facts = _inferred_graph(proto)  # what the child computes, here in the test's process
    opset = next(i.version for i in proto.opset_import if i.domain in ("", "ai.onnx"))
    assert set(facts[0]) == {(op, opset) for op in ops}
