"""GroupNormFused: normalisation over groups of channels (diffusion UNets, VAEs), then SiLU.

    X [N, C, *spatial] is split into ``groups`` groups of C / groups channels;
    each (n, group) is normalised over its channels and all spatial positions:
        Y = (X - mean) / sqrt(var + epsilon) * gamma[c] + beta[c]
        activation="silu": Y = Y · sigmoid(Y)

Inputs: ``X`` (rank ≥ 2, channels on axis 1), ``gamma``/``beta`` ``[C]``, each
optional (absent: ones, zeros). The SiLU that follows nearly every GroupNorm
in a UNet resnet block is part of the op, as in ONNX Runtime's contrib
``GroupNorm(activation=1)``: one pass over the tensor instead of three.

The decomposition is the spelling both PyTorch exporters write for
``nn.GroupNorm``: ``Reshape(X, [0, G, -1]) → InstanceNormalization → Reshape(Shape(X))
→ Mul(gamma) → Add(beta)``. ONNX Runtime's CPU provider runs it at half the time
of ONNX ``GroupNormalization`` (0.40 ms against 1.01 ms on [1, 128, 64, 64], 32
groups, ORT 1.31), so a model written with the ONNX op or with mean/variance
arithmetic gets faster by being decomposed this way. InstanceNormalization has
float32 and float16 kernels in ORT only; other float types get the same statistics
from ReduceMean.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.node import Node
from onnxopt.ops.base import FusedOp
from onnxopt.ops.norms import scalar

INSTANCE_NORM_DTYPES = frozenset({"float32", "float16"})


def _i64(b, values, hint: str):
    return b.const(np.array(values, np.int64), hint)


def channel_view(b, value, rank: int):
    """A per-channel ``[C]`` vector as ``[C, 1, …, 1]``, broadcasting over X's spatial axes."""
    trailing = [1] * (rank - 2)
    if value.const is not None:
        arr = value.const.numpy()
        return b.const(arr.reshape([arr.size, *trailing]), "per_channel")
    return b.op("Reshape", value, _i64(b, [-1, *trailing], "per_channel_shape"))


def _group_statistics(b, grouped, eps: float, dtype: str, groups: int):
    """``grouped [N, G, M]`` normalised over its last axis."""
    if dtype in INSTANCE_NORM_DTYPES:
        np_dtype = numpy_dtype(dtype)
        return b.op("InstanceNormalization", grouped,
                    b.const(np.ones([groups], np_dtype), "ones"),
                    b.const(np.zeros([groups], np_dtype), "zeros"), epsilon=eps)
    axes = _i64(b, [-1], "axes")
    mean = b.op("ReduceMean", grouped, axes, keepdims=1)
    centered = b.op("Sub", grouped, mean)
    var = b.op("ReduceMean", b.op("Mul", centered, centered), axes, keepdims=1)
    std = b.op("Sqrt", b.op("Add", var, scalar(b, eps, dtype, "epsilon")))
    return b.op("Div", centered, std)


def decompose_group_norm(b, node: Node):
    x, gamma, beta = node.inputs[0], node.input(1), node.input(2)
    groups = int(node.attr("groups", 1))
    eps = float(node.attr("epsilon", 1e-5))
    dtype = x.dtype or "float32"
    rank = x.rank or 4
    grouped = b.op("Reshape", x, _i64(b, [0, groups, -1], "groups_shape"))
    normed = _group_statistics(b, grouped, eps, dtype, groups)
    y = b.op("Reshape", normed, b.op("Shape", x))
    if gamma is not None:
        y = b.op("Mul", y, channel_view(b, gamma, rank))
    if beta is not None:
        y = b.op("Add", y, channel_view(b, beta, rank))
    if node.attr("activation", "") == "silu":
        y = b.op("Mul", y, b.op("Sigmoid", y))
    return [y]


def reference_group_norm(x, gamma=None, beta=None, *, groups=1, epsilon=1e-5, activation="",
                         **_):
    """NumPy GroupNorm (then SiLU) in float64."""
    dtype = np.asarray(x).dtype
    v = np.asarray(x, np.float64)
    n, c = v.shape[0], v.shape[1]
    grouped = v.reshape(n, groups, -1)
    mean = grouped.mean(axis=-1, keepdims=True)
    var = ((grouped - mean) ** 2).mean(axis=-1, keepdims=True)
    y = ((grouped - mean) / np.sqrt(var + epsilon)).reshape(v.shape)
    view = [c] + [1] * (v.ndim - 2)
    if gamma is not None:
        y = y * np.asarray(gamma, np.float64).reshape(view)
    if beta is not None:
        y = y + np.asarray(beta, np.float64).reshape(view)
    if activation == "silu":
        y = y / (1.0 + np.exp(-y))
    return y.astype(dtype)


GROUP_NORM = FusedOp(
    name="GroupNormFused",
    inputs=("X", "gamma?", "beta?"),
    outputs=("Y",),
    attrs={"groups": 1, "epsilon": 1e-5, "activation": ""},
    decompose=decompose_group_norm,
    reference=reference_group_norm,
    doc=__doc__,
)
