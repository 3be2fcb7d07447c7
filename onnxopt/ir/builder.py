"""Making new nodes: the one builder that normalization, rules and kernel emission share.

A :class:`NodeBuilder` places every node it makes before an anchor node (so a rewrite
lands where the computation it replaces was), names it after who made it, records
that name on the node (``created_by``: explain and the exporter read it), annotates
its meaning (:func:`onnxopt.ir.semantics.annotate`) and turns Python values into typed
attributes. Fused ops (domain :data:`FUSED_DOMAIN`) are checked against their schema
when a schema table is given: a rule cannot create a fused node its kernels and
decomposition would misread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import numpy as np
from onnx import AttributeProto

from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Attr, Node
from onnxopt.ir.semantics import annotate
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Shape, Value

FUSED_DOMAIN = "ai.onnxopt"
"""The domain of onnxopt's abstract fused operators (``AttentionFused``, ...)."""


class FusedPort(Protocol):
    """One input or output of a fused op (``onnxopt.ops.base.Port`` provides it)."""

    name: str
    optional: bool


class FusedAttributes(Protocol):
    """A fused op's attribute record (``onnxopt.ops.base.FusedAttrs`` provides it)."""

    def as_attributes(self) -> dict[str, Any]: ...


class FusedSchema(Protocol):
    """What the builder checks of a fused op (``onnxopt.ops.base.FusedOp`` provides it)."""

    name: str
    inputs: tuple[FusedPort, ...]
    outputs: tuple[FusedPort, ...]
    attrs: type  # the op's attribute record class


class SchemaError(ValueError):
    """A fused node that does not fit its op's schema: a bug in the rule that made it."""


def make_attr(value: Any) -> Attr:
    """A Python value → a typed attribute."""
    if isinstance(value, Attr):
        return value
    if isinstance(value, bool):
        return Attr(AttributeProto.INT, int(value))
    if isinstance(value, (int, np.integer)):
        return Attr(AttributeProto.INT, int(value))
    if isinstance(value, (float, np.floating)):
        return Attr(AttributeProto.FLOAT, float(value))
    if isinstance(value, str):
        return Attr(AttributeProto.STRING, value)
    if isinstance(value, LazyTensor):
        return Attr(AttributeProto.TENSOR, value)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
            return Attr(AttributeProto.INTS, tuple(int(v) for v in value))
        if all(isinstance(v, (int, float, np.number)) for v in value):
            return Attr(AttributeProto.FLOATS, tuple(float(v) for v in value))
        if all(isinstance(v, str) for v in value):
            return Attr(AttributeProto.STRINGS, tuple(value))
    raise TypeError(f"cannot make an attribute from {value!r}")


class NodeBuilder:
    """Creates nodes before ``anchor`` in ``graph`` (at its end: ``None``), stamped with
    ``created_by``.

    ``opset`` is the model's ONNX opset (decompositions spell ops for it); ``schemas``
    maps fused op names to their schemas, checked by :meth:`fused`. ``by_op``: nodes are
    named by their op type alone (``Mul``, ``Mul_3``), as normalization's nodes always were,
    rather than after who made them (``attention/MatMul``): the written models keep their
    names, and a node's maker stays on it as ``created_by``.
    """

    def __init__(self, graph: Graph, anchor: Node | None, created_by: str, *, opset: int = 0,
                 schemas: Mapping[str, FusedSchema] | None = None, by_op: bool = False
                 ) -> None:
        self.graph = graph
        self.anchor = anchor
        self.created_by = created_by
        self.opset = opset
        self.schemas = schemas
        self.by_op = by_op
        self.nodes: list[Node] = []

    def _name(self, op_type: str, name: str | None) -> str:
        return self.graph.names.fresh(name or (op_type if self.by_op
                                               else f"{self.created_by}/{op_type}"))

    def op(self, op_type: str, *inputs: Value | None, domain: str = "", outputs: int = 1,
           name: str | None = None, **attrs: Any) -> Any:
        """Add a node; returns its output Value (or a list when ``outputs > 1``)."""
        node = self.graph.make_node(
            op_type, inputs, num_outputs=outputs, domain=domain,
            attrs={k: make_attr(v) for k, v in attrs.items() if v is not None},
            name=self._name(op_type, name), before=self.anchor, created_by=self.created_by)
        annotate(node)
        self.nodes.append(node)
        return node.outputs if outputs > 1 else node.outputs[0]

    def node(self, op_type: str, inputs: Iterable[Value | None], *,
             attrs: Mapping[str, Any] | None = None, dtype: str | None = None,
             shape: Shape = None) -> Node:
        """Add a standard-domain node of one output whose type the caller knows (a rewrite
        that replaces a value of known dtype and shape), and return the node itself, for a
        rewrite that moves or removes what it made."""
        node = self.graph.make_node(
            op_type, inputs, attrs={k: make_attr(v) for k, v in (attrs or {}).items()
                                    if v is not None},
            name=self._name(op_type, None), before=self.anchor, created_by=self.created_by)
        node.output.dtype = dtype
        node.output.shape = shape
        annotate(node)
        self.nodes.append(node)
        return node

    def fused(self, op_type: str, *inputs: Value | None, attrs: FusedAttributes,
              outputs: int = 1) -> Any:
        """Add an ``ai.onnxopt`` node stating every attribute of its record ``attrs``, checked
        against the op's schema when the builder has one."""
        if self.schemas is not None:
            check_fused(self.schemas, op_type, inputs, outputs, attrs)
        return self.op(op_type, *inputs, domain=FUSED_DOMAIN, outputs=outputs,
                       **attrs.as_attributes())

    def const(self, array: Any, hint: str = "const") -> Value:
        arr = np.asarray(array)
        return self.graph.add_constant(LazyTensor.from_array(arr), hint=f"{self.created_by}/{hint}")


def check_fused(schemas: Mapping[str, FusedSchema], op_type: str,
                inputs: tuple[Value | None, ...], outputs: int, attrs: FusedAttributes) -> None:
    """Raise :class:`SchemaError` unless the node fits the op's schema: a known op, no more
    inputs than its ports, every required port given, the declared output count at most, and
    the op's own attribute record (not another op's, nor one with attributes it lacks)."""
    schema = schemas.get(op_type)
    if schema is None:
        raise SchemaError(f"{op_type}: no fused op of that name")
    if len(inputs) > len(schema.inputs):
        raise SchemaError(f"{op_type}: {len(inputs)} inputs, the schema declares "
                          f"{len(schema.inputs)}")
    for k, port in enumerate(schema.inputs):
        if not port.optional and (k >= len(inputs) or inputs[k] is None):
            raise SchemaError(f"{op_type}: required input {k} ({port.name}) is missing")
    if outputs > len(schema.outputs):
        raise SchemaError(f"{op_type}: {outputs} outputs, the schema declares "
                          f"{len(schema.outputs)}")
    if not isinstance(attrs, schema.attrs):
        raise SchemaError(f"{op_type}: its attributes are a {schema.attrs.__name__}, got a "
                          f"{type(attrs).__name__}")
    unknown = sorted(set(attrs.as_attributes()) - set(schema.attrs.names()))
    if unknown:
        raise SchemaError(f"{op_type}: attributes {unknown} are not in its schema")
