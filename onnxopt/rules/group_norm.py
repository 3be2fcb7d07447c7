"""GroupNorm over channel groups  ->  ai.onnxopt.GroupNormFused(x, γ, β)

Diffusion UNets and VAEs normalise with ``nn.GroupNorm``, which both PyTorch
exporters write as ``Reshape(x, [0, G, -1]) → InstanceNormalization(1, 0) →
Reshape(Shape(x)) → Mul(γ) → Add(β)``: instance norm over G pseudo-channels
is group norm (rule ``group_norm``). Other producers write ONNX
``GroupNormalization`` (opset 18: one scale per group; opset 21: one per channel;
rule ``group_norm_op``, of the same family). Both become one fused op whose
γ and β are per channel: non-trivial InstanceNormalization scale/bias
(one per group) and opset-18 group scales are folded into them, which is exact.

Normalization removes an all-ones γ or an all-zeros β, so the decomposed form
ends at the Add, the Mul or the Reshape back: one pattern with a root for each,
and an ending refuses while the norm visibly continues with its per-channel
weight or bias, so the whole norm is fused once.

The SiLU after a GroupNorm (a UNet resnet block's ``silu(norm(x))``) is taken
in by ``group_norm_silu`` once the norm is fused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import FUSED_DOMAIN, NodeBuilder
from onnxopt.ir.dtypes import FLOAT_TYPES, numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.ir.value import Value
from onnxopt.match.pattern import Builder, Match
from onnxopt.ops import GroupNormAttrs, SiluAttrs
from onnxopt.refusal import Refusal
from onnxopt.rules._norm import ends_later
from onnxopt.rules.base import Facts, Rule


@dataclass(frozen=True)
class GroupNormFacts(Facts):
    groups: int = 1
    epsilon: float = 1e-5
    gamma: np.ndarray | None = None  # [C] in float64, None: all ones
    beta: np.ndarray | None = None  # [C] in float64, None: all zeros
    view: Value | None = None  # the [N, C, ...] target the norm's output has, when not x's


# The fused op carries one weight and one bias per channel, folded here from per-group and
# broadcast constants: a channel count beyond this is a declared shape that no tensor has.
MAX_CHANNELS = 1 << 20


def _channels(x: Value) -> tuple[int | None, Refusal | None]:
    """X's channel count (axis 1), or a reason it is not known."""
    at = f"%{x.name}"
    if x.shape is None:
        return None, Refusal("input_shape_unknown",
                             f"{at}: the shape of the normalised input is unknown", at)
    if len(x.shape) < 2:
        return None, Refusal("rank_too_low",
                             f"{at}: rank {len(x.shape)}, GroupNorm needs [N, C, ...]", at)
    c = x.shape[1]
    if not isinstance(c, int) or c <= 0:
        return None, Refusal("size_not_static",
                             f"{at}: the channel dimension is {c}, not a known size", at)
    if c > MAX_CHANNELS:
        return None, Refusal("too_many_channels", f"{at}: {c} channels, more than the "
                             f"{MAX_CHANNELS} whose weights onnxopt folds", at)
    return c, None


def _at(node: Node, reason: Refusal) -> Refusal:
    """``reason``, said of ``node``."""
    return Refusal(reason.code, f"{node.name}: {reason.text}", node.name)


def channel_vector(value: Value, x: Value, channels: int) -> np.ndarray | None:
    """``value`` as one number per channel of ``x`` ([C], float64), when it is a constant
    that broadcasts against ``x`` along the channel axis only; else None."""
    if value.const is None or x.rank is None:
        return None
    arr = value.const.numpy()
    if arr.ndim > x.rank or arr.dtype.kind != "f":
        return None
    for j, d in enumerate(arr.shape):
        axis = x.rank - arr.ndim + j
        if d != 1 and not (axis == 1 and d == channels):
            return None
    return np.broadcast_to(arr.reshape(-1).astype(np.float64), [channels]).copy()


def _channel_constant(node: Node, out: Value) -> bool:
    """``node`` (a Mul or Add reading ``out``) applies one constant per channel of ``out``."""
    other = [v for v in node.inputs if v is not out]
    c = out.shape[1] if out.shape is not None and len(out.shape) >= 2 else None
    return (len(node.inputs) == 2 and len(other) == 1 and isinstance(c, int)
            and channel_vector(other[0], out, c) is not None)


def _after_instance_norm(check=None):
    """A ``check`` for the Reshape back: it reads an InstanceNormalization (else this is one
    of the many Reshape → Mul → Add chains of a model, not worth a partial-match report),
    then ``check`` if given."""
    def run(node: Node) -> Refusal | None:
        src = node.inputs[0].producer if node.inputs and node.inputs[0] is not None else None
        if src is None or src.op_type != "InstanceNormalization":
            return Refusal("not_after_instance_norm",
                           "does not reshape an InstanceNormalization back")
        return check(node) if check is not None else None
    return run


def _split_reason(target: np.ndarray, x: Value, groups: int, allowzero: int
                  ) -> Refusal | None:
    """The Reshape before the instance norm splits x into [N, groups, ...]: instance norm then
    normalises each (n, group) over everything after the group axis, whatever its layout
    (``[0, G, -1]`` from PyTorch, ``[N, G, C/G, H, W]`` from others)."""
    shown = [int(v) for v in target.reshape(-1)]
    if len(shown) < 3 or shown[1] != groups:
        return Refusal("split_not_groups",
                       f"the split Reshape's target is {shown}, not [N, {groups}, ...]")
    n = shown[0]
    if n == 0 and allowzero:
        return Refusal("split_allowzero",
                       f"the split Reshape has allowzero=1 and a 0 in its target {shown}")
    if n == 0 or (n > 0 and sd.same(n, x.shape[0])):
        return None
    count = sd.product(x.shape[1:])
    if n == -1 and all(v > 0 for v in shown[1:]) and isinstance(count, int) and count == int(
            np.prod(shown[1:], dtype=np.int64)):
        return None  # the element count fixes the -1 at N
    return Refusal("split_batch_unproven", f"the split Reshape's target {shown} is not proven "
                   f"to keep the batch of {_shape(x.shape)}")


def _merged_view(merge: Node, x: Value, channels: int
                 ) -> tuple[Value | None, Refusal | None]:
    """What the Reshape after the instance norm restores: x's own shape (None, None), another
    ``[N, C, ...]`` view of x (its target, None) — a later view folded into it — or a reason.

    Group statistics do not depend on how the spatial axes are laid out, so any target that
    keeps the batch and the channels is the same norm on a view of x.
    """
    target = merge.inputs[1]
    producer = target.producer
    if (producer is not None and producer.op_type == "Shape" and producer.inputs[0] is x
            and producer.attr("start", 0) == 0 and producer.attr("end") is None):
        return None, None
    out = merge.outputs[0]
    if target.const is not None:
        t = [int(v) for v in target.const.numpy().reshape(-1)]
        batch_kept = len(t) >= 2 and (
            (t[0] == 0 and not merge.attr("allowzero", 0))
            or (t[0] > 0 and sd.same(t[0], x.shape[0]))
            # [-1, C, s...]: the element count fixes the -1 at N when s holds x's positions
            or (t[0] == -1 and all(v > 0 for v in t[1:])
                and sd.product(x.shape[2:]) == int(np.prod(t[2:], dtype=np.int64))))
        if not batch_kept or t[1] != channels:
            return None, Refusal("merge_changes_view", f"its target {t} does not keep the "
                                 f"batch and the {channels} channels")
        if len(t) == len(x.shape) and _same_spatial(t[2:], list(x.shape[2:])):
            return None, None
        return target, None
    if (out.shape is not None and len(out.shape) >= 2 and sd.same(out.shape[0], x.shape[0])
            and out.shape[1] == channels):
        same = len(out.shape) == len(x.shape) and all(
            sd.same(a, b) for a, b in zip(out.shape, x.shape))
        return (None if same else target), None
    return None, Refusal("merge_unproven", f"the Reshape after the norm gives "
                         f"{_shape(out.shape)}, which is not proven to keep the batch and "
                         f"channels of {_shape(x.shape)}")


def _same_spatial(target: list[int], spatial: list) -> bool:
    """A constant target equals x's spatial dims: equal numbers, and at most one -1 or 0-free
    unknown, which the element count (batch and channels equal) then fixes."""
    unproven = [i for i, (t, d) in enumerate(zip(target, spatial))
                if not (t > 0 and sd.same(t, d))]
    return not unproven or (len(unproven) == 1 and target[unproven[0]] == -1)


def _fold_instance_affine(scale, bias, gamma, beta, channels):
    """γ·(s_g·n + b_g) + β  =  (γ·s_g)·n + (γ·b_g + β): the per-group scale and bias of the
    instance norm folded into the per-channel weight and bias (None: all ones, all zeros)."""
    per_group = channels // len(scale)
    g = np.ones(channels) if gamma is None else gamma
    new_gamma = g * scale.repeat(per_group)
    new_beta = g * bias.repeat(per_group) + (0.0 if beta is None else beta)
    return (None if np.all(new_gamma == 1.0) else new_gamma,
            None if np.all(new_beta == 0.0) else new_beta)


class GroupNorm(Rule):
    """Reshape → InstanceNormalization → Reshape → Mul(γ) → Add(β)  ->  GroupNormFused"""

    name = "group_norm"
    root = ("Add", "Mul", "Reshape")

    def pattern(self, p: Builder):
        x = p.var("x", dtype=FLOAT_TYPES)
        split = p.Reshape(x, p.const("split_shape"), name="split", reads=("allowzero",))
        inorm = p.InstanceNormalization(split, p.const("in_scale"), p.const("in_bias"),
                                        name="inorm", reads=("epsilon",))

        def merged(check=None):
            return p.Reshape(inorm, p.var("merge_shape"), name="merge",
                             check=_after_instance_norm(check), reads=("allowzero",))

        gamma, beta = p.const("gamma"), p.const("beta")
        return p.any(
            p.Add(p.Mul(merged(), gamma, name="weight"), beta, name="bias"),
            p.Add(merged(), beta, name="bias"),
            p.Mul(merged(), gamma, name="weight", check=ends_later("Add", weight=_channel_constant)),
            merged(ends_later("Mul", "Add", weight=_channel_constant)),
        )

    def legal(self, m: Match, target) -> Refusal | GroupNormFacts:
        x = m.x
        channels, reason = _channels(x)
        if reason:
            return reason
        scale, bias = m.in_scale.const.numpy(), m.in_bias.const.numpy()
        groups = scale.size
        if scale.ndim != 1 or bias.shape != scale.shape:
            return Refusal("not_per_group", f"{m.inorm.name}: scale {list(scale.shape)} and "
                           f"bias {list(bias.shape)} are not one number per group", m.inorm.name)
        if channels % groups:
            return Refusal("groups_do_not_divide", f"%{x.name}: {channels} channels do not "
                           f"split into {groups} groups", f"%{x.name}")
        if reason := _split_reason(m.split_shape.const.numpy(), x, groups,
                                   m.split.attr("allowzero", 0)):
            return _at(m.split, reason)
        out = m.merge.outputs[0]
        view, reason = _merged_view(m.merge, x, channels)
        if reason:
            return _at(m.merge, reason)
        gamma = beta = None
        for value, what in ((m.gamma, "weight"), (m.beta, "bias")):
            if value is None:
                continue
            vector = channel_vector(value, out, channels)
            if vector is None:
                return Refusal("not_per_channel", f"%{value.name}: the {what} has shape "
                               f"{list(value.const.shape)}, not one number per channel of "
                               f"{_shape(x.shape)}", f"%{value.name}")
            gamma, beta = (vector, beta) if what == "weight" else (gamma, vector)
        gamma, beta = _fold_instance_affine(scale.astype(np.float64), bias.astype(np.float64),
                                            gamma, beta, channels)
        return GroupNormFacts(groups=groups, epsilon=float(m.inorm.attr("epsilon", 1e-5)),
                              gamma=gamma, beta=beta, view=view)

    def rewrite(self, b: NodeBuilder, m: Match, facts: GroupNormFacts):
        x = m.x
        if facts.view is not None:  # the norm's output is another [N, C, ...] view of x
            shaped = b.op("Reshape", x, facts.view)
            shaped.dtype, shaped.shape = x.dtype, m.merge.outputs[0].shape
            x = shaped
        return emit_group_norm(b, x, facts)

    def describe(self, m: Match, facts: GroupNormFacts) -> str:
        return f"{facts.groups} groups, epsilon {facts.epsilon:g}"


class GroupNormOp(Rule):
    """GroupNormalization(x, scale, bias)  ->  ai.onnxopt.GroupNormFused(x, γ, β)"""

    name = "group_norm_op"
    family = "group_norm"
    root = "GroupNormalization"

    def pattern(self, p: Builder):
        return p.GroupNormalization(p.var("x", dtype=FLOAT_TYPES), p.const("scale"),
                                    p.const("bias"), name="gn",
                                    reads=("num_groups", "epsilon", "stash_type"))

    def legal(self, m: Match, target) -> Refusal | GroupNormFacts:
        x = m.x
        channels, reason = _channels(x)
        if reason:
            return reason
        groups = int(m.gn.attr("num_groups", 0))
        if groups <= 0 or channels % groups:
            return Refusal("groups_do_not_divide", f"{m.gn.name}: {channels} channels do not "
                           f"split into {groups} groups", m.gn.name)
        vectors = []
        for value, what in ((m.scale, "scale"), (m.bias, "bias")):
            arr = value.const.numpy().astype(np.float64).reshape(-1)
            # opset 18 has one number per group, opset 21 one per channel: the size says which
            if arr.size == groups:
                arr = arr.repeat(channels // groups)
            elif arr.size != channels:
                return Refusal("not_per_group_or_channel", f"%{value.name}: the {what} holds "
                               f"{arr.size} numbers, neither one per group ({groups}) nor one "
                               f"per channel ({channels})", f"%{value.name}")
            vectors.append(arr)
        return _facts(groups, float(m.gn.attr("epsilon", 1e-5)), *vectors)

    def rewrite(self, b: NodeBuilder, m: Match, facts: GroupNormFacts):
        return emit_group_norm(b, m.x, facts)

    def describe(self, m: Match, facts: GroupNormFacts) -> str:
        return f"GroupNormalization, {facts.groups} groups, epsilon {facts.epsilon:g}"


def _facts(groups: int, epsilon: float, gamma: np.ndarray, beta: np.ndarray) -> GroupNormFacts:
    """The facts of a group norm; a scale of ones or a shift of zeros is left out."""
    return GroupNormFacts(groups=groups, epsilon=epsilon,
                          gamma=None if np.all(gamma == 1.0) else gamma,
                          beta=None if np.all(beta == 0.0) else beta)


def _not_reshaped_back(node: Node) -> Refusal | None:
    """The grouped spelling reshapes the instance norm's output back: that is rule
    ``group_norm``'s, on the [N, G, ...] view (one group per pseudo-channel of the view)."""
    readers = node.outputs[0].uses()
    if readers and all(user.op_type == "Reshape" for user, _ in readers):
        return Refusal("grouped_form", "its output is reshaped back: the grouped spelling")
    return None


class GroupNormPerChannel(Rule):
    """InstanceNormalization(x, γ, β), one group per channel  ->  GroupNormFused(x, γ, β, groups=C)

    ``nn.GroupNorm(C, C)`` (wav2vec2's and HuBERT's feature extractor) is instance norm: the
    exporters write it as one InstanceNormalization holding the weight and bias, and with
    G = C normalization removes the Reshape pair of the grouped spelling, so rule
    ``group_norm`` never sees it. An InstanceNormalization whose output is reshaped back is
    left to that rule.
    """

    name = "group_norm_per_channel"
    family = "group_norm"
    root = "InstanceNormalization"

    def pattern(self, p: Builder):
        return p.InstanceNormalization(p.var("x", dtype=FLOAT_TYPES), p.const("scale"),
                                       p.const("bias"), name="inorm", reads=("epsilon",),
                                       check=_not_reshaped_back)

    def legal(self, m: Match, target) -> Refusal | GroupNormFacts:
        x = m.x
        channels, reason = _channels(x)
        if reason:
            return reason
        if len(x.shape) < 3:
            return Refusal("rank_too_low", f"%{x.name}: rank {len(x.shape)}, instance norm "
                           "needs [N, C, positions...]", f"%{x.name}")
        vectors = []
        for value, what in ((m.scale, "scale"), (m.bias, "bias")):
            arr = value.const.numpy()
            if arr.ndim != 1 or arr.size != channels or arr.dtype.kind != "f":
                return Refusal("not_per_channel", f"%{value.name}: the {what} has shape "
                               f"{list(arr.shape)}, not one number per channel of "
                               f"{_shape(x.shape)}", f"%{value.name}")
            vectors.append(arr.astype(np.float64))
        return _facts(channels, float(m.inorm.attr("epsilon", 1e-5)), *vectors)

    def rewrite(self, b: NodeBuilder, m: Match, facts: GroupNormFacts):
        return emit_group_norm(b, m.x, facts)

    def describe(self, m: Match, facts: GroupNormFacts) -> str:
        return (f"InstanceNormalization, one group per channel ({facts.groups}), "
                f"epsilon {facts.epsilon:g}")


class GroupNormSilu(Rule):
    """GroupNormFused(x) · sigmoid(GroupNormFused(x))  ->  GroupNormFused(x, activation=silu)"""

    name = "group_norm_silu"
    root = ("Mul", "SiluFused")

    def pattern(self, p: Builder):
        norm = p.op("GroupNormFused", p.var("x"), p.maybe(p.var("gamma")), p.maybe(p.var("beta")),
                    domain=FUSED_DOMAIN, name="norm", check=_no_activation)
        return p.any(p.Mul(norm, p.Sigmoid(norm)),
                     p.op("SiluFused", norm, domain=FUSED_DOMAIN, name="silu", check=_plain_silu))

    def rewrite(self, b: NodeBuilder, m: Match, facts):
        norm = m.norm
        attrs = replace(GroupNormAttrs.of(norm), activation="silu")
        return b.fused("GroupNormFused", *norm.inputs, attrs=attrs)

    def describe(self, m: Match, facts) -> str:
        return f"SiLU after the GroupNorm of %{m.x.name}"


def _no_activation(node: Node) -> Refusal | None:
    act = GroupNormAttrs.of(node).activation
    return Refusal("already_activated", f"already ends with {act}") if act else None


def _plain_silu(node: Node) -> Refusal | None:
    alpha = SiluAttrs.of(node).alpha
    return None if alpha == 1.0 else Refusal("not_plain_silu",
                                             f"sigmoid scale alpha={alpha:g}: not SiLU")


def emit_group_norm(b: NodeBuilder, x: Value, facts: GroupNormFacts) -> Value:
    dtype = numpy_dtype(x.dtype or "float32")
    weights = [None if v is None else b.const(v.astype(dtype), hint)
               for v, hint in ((facts.gamma, "gamma"), (facts.beta, "beta"))]
    if weights[1] is not None and weights[0] is None:
        weights[0] = b.const(np.ones(len(facts.beta), dtype), "gamma")
    while weights and weights[-1] is None:
        weights.pop()
    return b.fused("GroupNormFused", x, *weights,
                   attrs=GroupNormAttrs(groups=facts.groups, epsilon=facts.epsilon))


def _shape(shape) -> str:
    return "unknown" if shape is None else str(list(shape))
