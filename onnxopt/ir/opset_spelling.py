"""One meaning, one spelling: ONNX operators whose attributes became inputs.

ONNX moved several operands from attributes to inputs over the years
(``Squeeze``/``Unsqueeze``/``ReduceSum`` axes at opset 13, the other reductions at
18, ``Slice`` at 10, ``Pad``/``Clip`` at 11, ``Dropout``'s ratio at 12, ``TopK``'s k
at 10, ``Split``'s sizes at 13). The IR holds every node in the newest spelling,
so normalization and rules reason on one form whatever the model's opset: the
importer moves such attributes into constant inputs (:func:`upgrade`), and the
exporter writes each node back in the model's own opset (:func:`downgrade`).

Ops whose *meaning* (not just spelling) changed, such as ``Softmax`` before
opset 13 over anything but the last axis, and every op of an opset older than
7, are kept opaque: they move to :data:`LEGACY_DOMAIN`, where no pass or rule
looks, and go back to their own domain on export.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto

from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import LEGACY_DOMAIN, OPAQUE_OP, STANDARD_DOMAINS, Attr, Node
from onnxopt.ir.schema_facts import signature
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Value

OLDEST_MODELLED_OPSET = 7  # broadcasting, Cast(to=int) and friends took their modern meaning


class SpellingError(ValueError):
    """A node cannot be written in the model's opset (a dynamic operand the old form lacks)."""


@dataclass(frozen=True)
class Moved:
    """An attribute that became input ``index``; ``kind`` says how its value is typed."""

    attr: str
    index: int
    kind: str  # "ints" (int64 1-D), "int1" (int64 [1]), "data" (scalar of the data's type),
    #            "float" (float32 scalar)


_REDUCE_18 = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")

MOVED_SINCE: dict[str, tuple[int, tuple[Moved, ...]]] = {
    "Squeeze": (13, (Moved("axes", 1, "ints"),)),
    "Unsqueeze": (13, (Moved("axes", 1, "ints"),)),
    "ReduceSum": (13, (Moved("axes", 1, "ints"),)),
    **{op: (18, (Moved("axes", 1, "ints"),)) for op in _REDUCE_18},
    "Split": (13, (Moved("split", 1, "ints"),)),
    "Slice": (10, (Moved("starts", 1, "ints"), Moved("ends", 2, "ints"), Moved("axes", 3, "ints"))),
    "Pad": (11, (Moved("pads", 1, "ints"), Moved("value", 2, "data"))),
    "Clip": (11, (Moved("min", 1, "data"), Moved("max", 2, "data"))),
    "Dropout": (12, (Moved("ratio", 1, "float"),)),
    "TopK": (10, (Moved("k", 1, "int1"),)),
}

# Inputs and attributes the newer form has and the older lacks: on export they must be absent
# (or hold the value that means "as before").
_NEWER_ONLY_INPUTS = {"Slice": (4,), "Pad": (3,), "Dropout": (2,)}
_NEWER_ONLY_ATTRS = {"noop_with_empty_axes": 0, "num_outputs": None}
_AXIS_COERCING = frozenset({"Softmax", "LogSoftmax", "Hardmax"})  # 2-D coercion before 13


def upgrade(node: Node, graph: Graph, opset: int) -> None:
    """Put a freshly imported standard-domain node into the newest spelling, or make it opaque.

    ``node``'s inputs must already be wired; its first input's dtype is read for
    operands typed like the data (``Pad``'s value, ``Clip``'s bounds).
    """
    if opset < OLDEST_MODELLED_OPSET or _off_schema(node, opset):
        make_opaque(node)
        return
    if node.op_type in _AXIS_COERCING and opset < 13:
        if not _coerced_axis_is_last(node):
            make_opaque(node)
        return
    entry = MOVED_SINCE.get(node.op_type)
    if entry is None or opset >= entry[0]:
        return
    _, moved = entry
    data = node.input(0)
    new_inputs = list(node.inputs)
    for m in moved:
        if m.attr not in node.attrs:
            continue
        array = _attr_array(node.attr(m.attr), m.kind, None if data is None else data.dtype)
        if array is None:
            make_opaque(node)
            return
        const = graph.add_constant(LazyTensor.from_array(array), hint=f"{node.name}_{m.attr}")
        while len(new_inputs) <= m.index:
            new_inputs.append(None)
        new_inputs[m.index] = const
    for m in moved:
        node.attrs.pop(m.attr, None)
    while new_inputs and new_inputs[-1] is None:
        new_inputs.pop()
    graph.set_inputs(node, new_inputs)


def _off_schema(node: Node, opset: int) -> bool:
    """The node does not fit its op's schema at ``opset``: no such op, an attribute it does not
    have or of another type, a count of inputs or outputs outside the schema's range, or a
    required input omitted. ONNX Runtime refuses such a node; no pass may read it."""
    schema = signature(node.op_type, opset)
    if schema is None:
        return True
    attrs, (min_in, max_in), options, (min_out, max_out) = schema
    for name, attr in node.attrs.items():
        if isinstance(attr.value, tuple) and len(attr.value) == 2 and attr.value[0] == "ref":
            continue  # a function body's reference to its caller's attribute
        if attrs.get(name) != attr.type:
            return True
    inputs = node.inputs
    if not min_in <= len(inputs) <= max_in or not min_out <= len(node.outputs) <= max_out:
        return True
    for k, value in enumerate(inputs):
        option = options[min(k, len(options) - 1)] if options else "optional"
        if value is None and option != "optional":
            return True
    return _bad_values(node)


def _bad_values(node: Node) -> bool:
    """Attribute values no runtime accepts, where passes would read them as meaning something:
    a Transpose ``perm`` that is not a permutation of the input's axes, a ``batch_dims``
    outside the inputs' ranks."""
    if node.op_type == "Transpose" and "perm" in node.attrs:
        perm = list(node.attr("perm"))
        x = node.input(0)
        rank = len(perm) if x is None or x.rank is None else x.rank
        return sorted(perm) != list(range(rank))
    if node.op_type in ("GatherND", "GatherElements", "ScatterND") and "batch_dims" in node.attrs:
        # (onnx's inference segfaults on a negative one, ORT aborts on a huge one)
        ranks = [v.rank for v in node.inputs[:2] if v is not None and v.rank is not None]
        batch_dims = node.attr("batch_dims")
        return not 0 <= batch_dims < min(ranks, default=65)
    return False


def make_opaque(node: Node) -> None:
    """Keep ``node`` out of every pass's sight until export (see the module docstring)."""
    node.sem["onnx_domain"] = node.domain
    node.sem["onnx_op"] = node.op_type
    node.domain = LEGACY_DOMAIN
    node.op_type = OPAQUE_OP  # no pass comparing op types can take it for the op it was


def _coerced_axis_is_last(node: Node) -> bool:
    """Before opset 13 Softmax flattens to 2-D at ``axis`` (default 1): the same as the modern
    op only when that axis is the last one. Then the IR spells it with ``axis=-1``."""
    axis = node.attr("axis", 1)
    x = node.input(0)
    rank = None if x is None else x.rank
    if axis != -1 and (rank is None or axis % max(rank, 1) != rank - 1):
        return False
    node.attrs["axis"] = Attr(AttributeProto.INT, -1)
    return True


def _attr_array(value, kind: str, data_dtype: str | None) -> np.ndarray | None:
    if kind == "ints":
        return np.asarray(list(value), dtype=np.int64).reshape(-1)
    if kind == "int1":
        return np.asarray([int(value)], dtype=np.int64)
    if kind == "float":
        return np.asarray(float(value), dtype=np.float32)
    if data_dtype is None:
        return None  # an operand typed like the data, whose type nothing tells
    try:
        return np.asarray(value, dtype=numpy_dtype(data_dtype))
    except (TypeError, ValueError, OverflowError):
        return None


def export_form(node: Node, opset: int) -> tuple[str, list[Value | None], dict[str, Attr]]:
    """``(domain, inputs, attributes)`` to write for ``node`` in a model of ONNX ``opset``."""
    if node.domain == LEGACY_DOMAIN:
        return node.sem.get("onnx_domain", ""), list(node.inputs), dict(node.attrs)
    inputs, attrs = list(node.inputs), dict(node.attrs)
    entry = MOVED_SINCE.get(node.op_type)
    if node.domain not in STANDARD_DOMAINS or entry is None or opset >= entry[0]:
        return node.domain, inputs, attrs
    _, moved = entry
    for index in _NEWER_ONLY_INPUTS.get(node.op_type, ()):
        if index < len(inputs) and inputs[index] is not None and not _means_default(
                node.op_type, inputs[index]):
            raise SpellingError(f"{node.name}: {node.op_type} input {index} has no form at "
                                f"opset {opset}")
    for name, neutral in _NEWER_ONLY_ATTRS.items():
        if name in attrs:
            if neutral is None or attrs[name].value != neutral:
                raise SpellingError(f"{node.name}: {node.op_type} attribute {name} has no form "
                                    f"at opset {opset}")
            del attrs[name]
    for m in moved:
        v = inputs[m.index] if m.index < len(inputs) else None
        if v is None:
            continue
        if v.const is None:
            raise SpellingError(f"{node.name}: {node.op_type} at opset {opset} needs a constant "
                                f"'{m.attr}', got the computed value %{v.name}")
        attrs[m.attr] = _array_attr(v.const.numpy(), m.kind)
    first = min(m.index for m in moved)
    return node.domain, inputs[:first], attrs


def _means_default(op_type: str, v: Value) -> bool:
    """A newer-only input that holds what the older form always did (Slice steps of 1,
    Dropout in inference mode)."""
    if v.const is None:
        return False
    arr = v.const.numpy()
    if op_type == "Slice":
        return bool(np.all(arr == 1))
    if op_type == "Dropout":
        return not bool(np.any(arr))
    return False


def _array_attr(arr: np.ndarray, kind: str) -> Attr:
    flat = arr.reshape(-1)
    if kind == "ints":
        return Attr(AttributeProto.INTS, tuple(int(x) for x in flat))
    if kind == "int1":
        return Attr(AttributeProto.INT, int(flat[0]))
    return Attr(AttributeProto.FLOAT, float(flat[0]))
