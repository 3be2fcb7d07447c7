"""What onnxopt reads from ONNX's operator schemas, with a way to have it without onnx's registry.

Two facts are read: an op's signature at an opset (its attributes' types, how many inputs and
outputs it takes, which inputs are optional; the importer checks every node against it,
:mod:`onnxopt.ir.opset_spelling`) and the defaults of its newest attributes (a pattern accepts
an attribute it does not name only at its default, :mod:`onnxopt.match.pattern`).

onnx builds its registry of every schema on the first lookup, 10-15 ms of every run (more than
importing a 300-node model otherwise costs). The importer's shape-inference child builds that
registry anyway: it computes both facts for the model's ops (and the defaults of the ops
normalization writes, :data:`WRITTEN_OPS`; :func:`facts_for`, 1-2 ms there) and sends them
back with the inferred types, and the parent takes them (:func:`take`). A fact they lack is
looked up in onnx, as before.
"""

from __future__ import annotations

from typing import Any

import onnx

# (attribute name -> AttributeProto type, (min, max) inputs, each formal input's option —
# "single", "optional" or "variadic" —, (min, max) outputs); None where ONNX has no such op.
Signature = tuple[dict[str, int], tuple[int, int], list[str], tuple[int, int]] | None

# Ops normalization and the rules write into a graph, whose defaults a pattern may then read.
WRITTEN_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "MatMul", "Gemm", "Reshape",
    "Transpose", "Softmax", "Where", "Cast", "Concat", "Unsqueeze", "Squeeze", "Slice", "Gather",
    "Expand", "ReduceMean", "Erf", "Tanh", "Sigmoid", "Relu", "LayerNormalization"})

_SIGNATURES: dict[tuple[str, int], Signature] = {}
_DEFAULTS: dict[str, dict[str, Any]] = {}


def signature(op_type: str, opset: int) -> Signature:
    """The default-domain op's signature at ``opset`` (see :data:`Signature`)."""
    key = (op_type, opset)
    if key not in _SIGNATURES:
        _SIGNATURES[key] = _signature(op_type, opset)
    return _SIGNATURES[key]


def attribute_defaults(op_type: str) -> dict[str, Any]:
    """The op's attributes that have a default in ONNX's newest schema, with it."""
    if op_type not in _DEFAULTS:
        _DEFAULTS[op_type] = _attribute_defaults(op_type)
    return _DEFAULTS[op_type]


def facts_for(op_types: set[str], opset: int) -> tuple[dict, dict]:
    """The signatures of ``op_types`` at ``opset`` and the defaults of those and of
    :data:`WRITTEN_OPS`, to be handed to :func:`take` in another process."""
    return ({(name, opset): signature(name, opset) for name in op_types},
            {name: attribute_defaults(name) for name in op_types | WRITTEN_OPS})


def take(facts: tuple[dict, dict]) -> None:
    """Keep what :func:`facts_for` computed elsewhere (a fact already looked up here stays)."""
    signatures, defaults = facts
    for key, value in signatures.items():
        _SIGNATURES.setdefault(key, value)
    for key, value in defaults.items():
        _DEFAULTS.setdefault(key, value)


def _signature(op_type: str, opset: int) -> Signature:
    try:
        schema = onnx.defs.get_schema(op_type, max_inclusive_version=opset, domain="")
    except onnx.defs.SchemaError:
        return None
    options = [str(i.option).rsplit(".", 1)[-1].lower() for i in schema.inputs]
    return ({name: int(a.type) for name, a in schema.attributes.items()},
            (schema.min_input, schema.max_input), options,
            (schema.min_output, schema.max_output))


def _attribute_defaults(op_type: str) -> dict[str, Any]:
    try:
        schema = onnx.defs.get_schema(op_type, domain="")
    except onnx.defs.SchemaError:
        return {}
    out = {}
    for name, a in schema.attributes.items():
        if a.default_value.type != onnx.AttributeProto.UNDEFINED:
            value = onnx.helper.get_attribute_value(a.default_value)
            if isinstance(value, bytes):
                value = value.decode()
            out[name] = tuple(value) if isinstance(value, list) else value
    return out
