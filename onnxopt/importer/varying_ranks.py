"""Values whose rank the computation does not fix, so no declared shape of theirs is believed.

A few ops take their output's rank from the *length* of a 1-D input: Reshape and Expand from
their shape, ConstantOfShape from its input, Unsqueeze and Squeeze from their axes, and a
reduction that drops its axes from those. When that length is not a number known before the
model runs (``Unsqueeze([0], axes=Range(0, seq))``), the output has rank ``seq + 1`` in one
run and another rank in the next, and a shape the file declares for it is true for one
length at most. onnx's inference then leaves the output without a rank; the importer would
otherwise fill it from the file's ``value_info``, and a fusion matched on that rank computes
something else (fuzz run 43: an attention fused at rank 4 on a value of rank ``seq + 2``).

Everything computed from such a value inherits the doubt, unless onnx's inference, which
starts from the graph's inputs and never from declared intermediate types, gave it a shape.
"""

from __future__ import annotations

from onnx import GraphProto, TensorProto, numpy_helper

from onnxopt.ir.node import STANDARD_DOMAINS
from onnxopt.ir.value import Shape

# op → the input whose length is (or moves) the output's rank.
_RANK_FROM_LENGTH = {"Reshape": 1, "Expand": 1, "ConstantOfShape": 0, "Unsqueeze": 1,
                     "Squeeze": 1}
_REDUCTIONS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
               "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}
_CANDIDATES = frozenset(_RANK_FROM_LENGTH) | _REDUCTIONS
_UNKNOWN = (None, None)


def ranks_that_vary(g: GraphProto, inferred: dict[str, tuple[str | None, Shape]]) -> set[str]:
    """The names in ``g`` (not its subgraphs) whose rank may differ from one run to the next,
    by ``inferred`` (onnx's inference: dtype and shape by name). One walk of the nodes where
    none is found (the table of producers is built only when a node could start one); where
    some are, walks until no more are, as a file need not list its nodes in order."""
    # What inference hands back for the graph's outputs is the file's own declaration.
    outputs = {o.name for o in g.output}
    varying: set[str] = set()
    lengths: _Lengths | None = None

    def rank_unknown(name: str) -> bool:
        return name in outputs or inferred.get(name, _UNKNOWN)[1] is None

    found = -1
    while len(varying) > found:
        found = len(varying)
        if lengths is not None:
            lengths.forget()  # what was said before a rank was found to vary may not hold
        for node in g.node:
            if varying and any(name in varying for name in node.input):
                varying.update(o for o in node.output if o and rank_unknown(o))
                continue
            if node.op_type not in _CANDIDATES:
                continue
            i = _length_input(node)
            if i is None or i >= len(node.input) or not node.input[i]:
                continue
            if not node.output or not node.output[0] or not rank_unknown(node.output[0]):
                continue
            if lengths is None:
                lengths = _Lengths(g, inferred, outputs, varying)
            if lengths.may_vary(node.input[i]):
                varying.add(node.output[0])
        if not varying:
            break
    return varying


class _Lengths:
    """Whether a 1-D value's length may differ from run to run. A length is fixed when it is
    known (a constant, or a number by inference), or follows from fixed ones: ``Shape`` of a
    value of fixed rank, a slice of it at constant bounds, a gather at constant indices, and
    what element-wise ops, ``Concat``, ``Unsqueeze``, a reshape to a constant target and
    ``ConstantOfShape(Shape(v))`` make of them, which is how exporters build reshape and
    expand targets. Anything else (``Range``, ``NonZero``, a graph input of symbolic
    length, an op onnxopt does not know here) may vary. Inference may not know the length of a
    fixed one: on a model whose every constant lies in external data, it reads none of them."""

    _ELEMENTWISE = frozenset({
        "Identity", "Cast", "Neg", "Abs", "Floor", "Ceil", "Round", "Sign", "Relu", "Not",
        "Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Where", "Equal", "Less", "Greater",
        "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Clip", "Concat", "Unsqueeze",
        "Squeeze"})
    _MAX_DEPTH = 64

    def __init__(self, g: GraphProto, inferred: dict[str, tuple[str | None, Shape]],
                 declared: set[str], varying_ranks: set[str]) -> None:
        self.inferred = inferred
        self.declared = declared  # names whose "inferred" shape is the file's declaration
        self.constant = {t.name for t in g.initializer}
        self.constant.update(n.output[0] for n in g.node if n.op_type == "Constant"
                             and n.domain in STANDARD_DOMAINS and n.output)
        self.inputs = {vi.name: vi for vi in g.input}
        self.producer = {o: n for n in g.node for o in n.output if o}
        self.values = _small_int_constants(g)
        self.varying_ranks = varying_ranks  # (filled by the walk as it goes)
        self._known: dict[str, bool] = {}

    def forget(self) -> None:
        self._known.clear()

    def may_vary(self, name: str, depth: int = 0) -> bool:
        if name in self._known:
            return self._known[name]
        answer = self._may_vary(name, depth)
        self._known[name] = answer
        return answer

    def _may_vary(self, name: str, depth: int) -> bool:
        if not name or name in self.constant:
            return False
        shape = None if name in self.declared else self.inferred.get(name, _UNKNOWN)[1]
        if shape is not None and all(isinstance(d, int) for d in shape):
            return False
        if name in self.varying_ranks or depth > self._MAX_DEPTH:
            return True
        node = self.producer.get(name)
        if node is None:  # a graph input (or a name read from outside): as declared
            vi = self.inputs.get(name)
            dims = vi.type.tensor_type.shape.dim if vi is not None else ()
            return vi is None or not all(d.HasField("dim_value") for d in dims)
        if node.domain not in STANDARD_DOMAINS:
            return True
        op, inputs = node.op_type, list(node.input)
        if op == "Shape":
            return not inputs or inputs[0] in self.varying_ranks
        if op == "Size":
            return False
        if op == "Slice":
            return any(self.may_vary(x, depth + 1) for x in inputs[:1]) or any(
                x and x not in self.constant for x in inputs[1:])
        if op == "Gather":  # as many as its indices
            return len(inputs) < 2 or self.may_vary(inputs[1], depth + 1)
        if op == "Reshape":  # to a constant target: as long as the target says, or as the data
            return len(inputs) < 2 or inputs[1] not in self.constant or self.may_vary(
                inputs[0], depth + 1)
        if op == "ConstantOfShape":  # of Shape(v): shaped as v is
            source = self.producer.get(inputs[0]) if inputs else None
            return (source is None or source.op_type != "Shape" or len(source.input) != 1
                    or self.may_vary(source.input[0], depth + 1))
        if op in self._ELEMENTWISE:
            return any(self.may_vary(x, depth + 1) for x in inputs)
        if op in _REDUCTIONS and _keepdims(node) == 1:
            return self._kept_reduction_may_vary(node, depth)
        return True

    def _kept_reduction_may_vary(self, node, depth: int) -> bool:
        """A reduction that keeps its axes has its input's rank; read as a length (a 1-D
        value), it is 1 where it reduces axis 0 — every axis when none is given, as dynamo
        counts a boolean index (``ReduceSum(Cast(mask))``) — else as long as its input."""
        axes = _reduction_axes(node, self.values)
        if axes is None:  # axes computed at run time
            return True
        if axes == [] and not _attr_int(node, "noop_with_empty_axes", 0):
            return False  # every axis: length 1
        if axes and any(a in (0, -1) for a in axes):
            return False
        return self.may_vary(node.input[0], depth + 1)


def _length_input(node) -> int | None:
    if node.domain not in STANDARD_DOMAINS:
        return None
    if node.op_type in _RANK_FROM_LENGTH:
        return _RANK_FROM_LENGTH[node.op_type]
    if node.op_type in _REDUCTIONS and _keepdims(node) == 0:
        return 1
    return None


def _keepdims(node) -> int:
    return _attr_int(node, "keepdims", 1)


def _attr_int(node, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return a.i
    return default


def _small_int_constants(g: GraphProto) -> dict[str, TensorProto | list[int]]:
    """1-D int64/int32 constants of at most 8 elements (reduction axes), by name: the
    tensor itself (read only when a reduction asks, by :func:`_int_values`) or the ints."""
    out: dict[str, TensorProto | list[int]] = {}
    for t in g.initializer:
        if _small_ints(t):
            out[t.name] = t
    for n in g.node:
        if n.op_type != "Constant" or n.domain not in STANDARD_DOMAINS or not n.output:
            continue
        for a in n.attribute:
            if a.name == "value" and _small_ints(a.t):
                out[n.output[0]] = a.t
            elif a.name == "value_ints":
                out[n.output[0]] = list(a.ints)
    return out


def _small_ints(t: TensorProto) -> bool:
    return (t.data_type in (TensorProto.INT32, TensorProto.INT64) and len(t.dims) <= 1
            and (not t.dims or t.dims[0] <= 8) and t.data_location != TensorProto.EXTERNAL)


def _int_values(known: TensorProto | list[int] | None) -> list[int] | None:
    """The ints of a constant, or None where its bytes do not hold what its header says (a
    corrupted file): the axes are then unknown, as if computed at run time, and the check
    that loads the model reports the damage, not this walk."""
    if known is None or isinstance(known, list):
        return known
    try:
        return [int(v) for v in numpy_helper.to_array(known).reshape(-1)]
    except (ValueError, TypeError):
        return None


def _reduction_axes(node, values: dict[str, TensorProto | list[int]]) -> list[int] | None:
    """The axes a reduction names (``[]``: none given), or None where they are computed."""
    for a in node.attribute:
        if a.name == "axes":
            return list(a.ints)
    if len(node.input) > 1 and node.input[1]:
        return _int_values(values.get(node.input[1]))
    return []
