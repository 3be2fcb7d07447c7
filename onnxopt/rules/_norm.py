"""What the LayerNorm and RMSNorm rules share: where a norm ends, its weights, its residual.

A decomposed norm ends at different ops depending on what normalization left
of it (an all-ones weight is a no-op and is gone, a float-to-float Cast may
remain), so its rule is registered once per possible last op. The worklist
visits nodes in graph order, and would fuse the bare normalisation before it
reaches the weight multiplication that follows; :func:`ends_later` makes an
ending refuse to match when the norm visibly continues, so the whole norm is
fused once, at its real end.

The residual ``Add(a, b)`` feeding a norm is folded into the fused op
(``residual`` input). It is found outside the pattern on purpose: when the sum
is also read elsewhere — the next block's residual — the fused op outputs it
as ``S`` instead of the match being refused for an intermediate used outside.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from onnxopt.ir import symdim as sd
from onnxopt.ir.dtypes import FLOAT_TYPES, dtype_name
from onnxopt.ir.node import STANDARD_DOMAINS, Node
from onnxopt.ir.value import Value
from onnxopt.legality.predicates import SHAPE_READERS
from onnxopt.match.pattern import Match
from onnxopt.ops import NormAttrs
from onnxopt.refusal import Refusal
from onnxopt.rules.base import Facts

# A norm's reductions: their axes (an input, or an attribute before opset 18) and keepdims are
# read through the node's recorded meaning (sem), checked by the rule's legality.
REDUCE_READS = ("axes", "keepdims", "noop_with_empty_axes")


def sole_reader(node: Node) -> Node | None:
    """The one node (Shape readers aside) that reads ``node``'s output, if exactly one."""
    out = node.outputs[0]
    if out.is_graph_output:
        return None
    readers = {id(n): n for n, _ in out.uses() if n.op_type not in SHAPE_READERS}
    return next(iter(readers.values())) if len(readers) == 1 else None


def feature_shape(value: Value, hidden, what: str) -> Refusal | None:
    """``value`` is one number per feature: shape ``[hidden]`` (leading 1s allowed)."""
    shape = value.shape
    if shape is None:
        return Refusal("weight_shape_unknown", f"%{value.name}: the shape of the {what} is "
                       "unknown", f"%{value.name}")
    if not shape or not sd.same(shape[-1], hidden) or any(d != 1 for d in shape[:-1]):
        return Refusal("not_per_feature", f"%{value.name}: the {what} has shape "
                       f"{list(shape)}, not [{hidden}]", f"%{value.name}")
    return None


def _feature_constant(node: Node, out: Value) -> bool:
    other = [v for v in node.inputs if v is not out]
    hidden = out.shape[-1] if out.shape else None
    return (len(node.inputs) == 2 and len(other) == 1 and other[0].const is not None
            and hidden is not None and feature_shape(other[0], hidden, "weight") is None)


def ends_later(*continuations: str, weight=None):
    """A ``check`` for a pattern's last node: fail when a ``continuations`` op extends the norm
    (a check's refusal is said of the node it checks: the matcher names it).

    ``"Cast"``: a float-to-float Cast (back to the input type); ``"Mul"``/``"Add"``: a weight or
    bias, one constant per feature — ``weight(reader, value)`` says what that is (default:
    along the last axis; GroupNorm's are along the channels).
    """
    is_weight = weight or _feature_constant

    def check(node: Node) -> Refusal | None:
        reader = sole_reader(node)
        if reader is None or reader.domain not in STANDARD_DOMAINS:
            return None
        op = reader.op_type
        if op not in continuations:
            return None
        if op == "Cast":
            if dtype_name(reader.attr("to", 0)) in FLOAT_TYPES:
                return Refusal("norm_continues",
                               "the norm continues with a Cast; it is fused there")
            return None
        if is_weight(reader, node.outputs[0]):
            what = "weight" if op == "Mul" else "bias"
            return Refusal("norm_continues", f"the norm continues with its {what} "
                           f"({reader.name}); it is fused there")
        return None
    return check


def divides_a_value(check=None):
    """A ``check`` for ``Div(x, std)``: x is computed (``Div(1, std)`` is a reciprocal, and the
    norm goes on), then ``check`` if given."""
    def run(node: Node) -> Refusal | None:
        if node.inputs[0] is not None and node.inputs[0].const is not None:
            return Refusal("divides_a_constant",
                           "divides a constant: a reciprocal, not the normalised value")
        return check(node) if check is not None else None
    return run


def per_feature_weights(hidden, gamma: Value | None, beta: Value | None = None
                        ) -> Refusal | None:
    """gamma and beta (when present) hold one number per feature."""
    for value, what in ((gamma, "scale (gamma)"), (beta, "bias (beta)")):
        if value is not None and (reason := feature_shape(value, hidden, what)):
            return reason
    return None


def hidden_size(x: Value) -> tuple[object, Refusal | None]:
    """The normalised (last) dimension of ``x``, or a reason when it is not known."""
    if x.shape is None or not x.shape:
        return None, Refusal("input_shape_unknown", f"%{x.name}: the shape of the normalised "
                             "input is unknown", f"%{x.name}")
    hidden = x.shape[-1]
    if not isinstance(hidden, int):
        return None, Refusal("size_not_static", f"%{x.name}: the normalised dimension is "
                             f"{hidden}, not a known size", f"%{x.name}")
    return hidden, None


@dataclass
class Residual:
    """``x = Add(a, b)`` folded into the norm; ``keep_sum`` when x is read elsewhere too."""

    add: Node
    a: Value
    b: Value
    keep_sum: bool


def find_residual(x: Value, m: Match, movable: tuple[Value | None, ...]) -> Residual | None:
    """The residual Add producing ``x``: two computed operands of x's own shape and dtype.

    ``movable`` are the fused op's other inputs: when the sum must stay visible, the fused
    node is placed where the Add was, so they must exist by then (constants, graph inputs).
    """
    add = x.producer
    if add is None or add.op_type != "Add" or add.domain not in STANDARD_DOMAINS:
        return None
    if len(add.inputs) != 2 or any(v is None or v.const is not None for v in add.inputs):
        return None
    a, b = add.inputs
    if a.shape is None or b.shape is None or x.shape is None or not (
            len(a.shape) == len(b.shape) == len(x.shape)
            and all(sd.same(p, q) and sd.same(p, r) for p, q, r in zip(a.shape, b.shape, x.shape))):
        return None
    if not (a.dtype == b.dtype == x.dtype):
        return None
    inside = {id(n) for n in m.nodes}
    keep = x.is_graph_output or any(id(n) not in inside for n, _ in x.uses())
    if keep and any(v is not None and v.producer is not None for v in movable):
        return None
    return Residual(add, a, b, keep)


@dataclass(frozen=True)
class NormFacts(Facts):
    residual: Residual | None = None
    beta: Value | None = None  # (LayerNormalization's own third input)


def norm_facts(residual: Residual | None, beta: Value | None = None) -> NormFacts:
    """The residual Add is absorbed; when its sum is read elsewhere too, it is an output."""
    if residual is None:
        return NormFacts(beta=beta)
    return NormFacts(absorbed=(residual.add,), beta=beta, residual=residual,
                     outputs=(residual.add.output,) if residual.keep_sum else ())


def emit_norm(b, facts: NormFacts, op: str, x: Value, weights: tuple[Value | None, ...],
              attrs: NormAttrs) -> Value | list[Value]:
    """Create the fused norm (folding the residual); its Y output, and the sum S as a second
    output of the match where the sum is read elsewhere."""
    res = facts.residual
    if res is None:
        inputs = [x, *weights]
    else:
        inputs = [res.a, *weights, res.b]
        attrs = replace(attrs, has_residual=True)
    while inputs and inputs[-1] is None:
        inputs.pop()
    if res is None or not res.keep_sum:
        return b.fused(op, *inputs, attrs=attrs)
    y, s = b.fused(op, *inputs, outputs=2, attrs=attrs)
    s.dtype, s.shape = res.add.output.dtype, res.add.output.shape
    return [y, s]


def residual_text(facts: NormFacts) -> str:
    res = facts.residual
    if res is None:
        return ""
    return ", residual + sum output" if res.keep_sum else ", residual"
