"""What each symbolic dim of a model's inputs stands for, so generated inputs fit it.

One size for every dynamic dim fed an image model ``x[7, 3, 7, 7]`` and ``x[29, 3, 29, 29]``:
a batch of 29 that costs time and says nothing more than a batch of 2, and images too small
for a stride-32 backbone. Each symbolic dim gets a role here instead:

- ``batch``: named so (``batch``, ``batch_size``; ``N``/``B``/``bs`` first in an input of
  rank 2 or more), or unnamed/unknown first in such an input — 1 and 2;
- ``spatial``: named ``height``/``width``/``h``/``w``, or the sides of a 4-D (5-D) float input
  whose channel dim is fixed (NCHW, NHWC, NCDHW) — sizes from the model's own hints
  (:func:`spatial_hints`), else 32 and 64;
- ``other`` (sequence lengths and everything else) — 7, 16, 29 as before.

A dim is keyed by its name, or ``?INPUT:POSITION`` where it has none (each unnamed dim is its
own symbol).
"""

from __future__ import annotations

import math

import onnx
from onnx import ModelProto, numpy_helper

from onnxopt.verification.readers import reached_readers, readers_by_value

BATCH, SPATIAL, OTHER = "batch", "spatial", "other"
_BATCH_NAMES = {"n", "b", "bs", "nb"}
_SPATIAL_NAMES = {"h", "w", "height", "width", "img_h", "img_w", "image_height", "image_width"}
_SEQUENCE_WORDS = ("seq", "len", "time", "token", "past", "step", "sample", "frame", "pos",
                   "total")
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                onnx.TensorProto.BFLOAT16}
# Ops a path from an image input to its first convolution may pass through unchanged in its
# sides (a cast, a normalisation by constants, NHWC→NCHW).
_SIDE_PRESERVING = {"Cast", "Identity", "Transpose", "Sub", "Mul", "Div", "Add"}


def dim_key(input_name: str, position: int, dim: onnx.TensorShapeProto.Dimension) -> str:
    return dim.dim_param or f"?{input_name}:{position}"


def graph_inputs(model: ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs a caller feeds (an input that is also an initializer has a default)."""
    initializers = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def dim_roles(model: ModelProto) -> dict[str, str]:
    """The role of every symbolic dim of the graph inputs, by key (:func:`dim_key`). A symbol
    seen at several places keeps its first role, but ``batch`` wins (a batch dim named
    anywhere is the batch everywhere)."""
    roles: dict[str, str] = {}
    for vi, dims, elem_type in _tensor_inputs(model):
        for i, d in enumerate(dims):
            if d.HasField("dim_value"):
                continue
            key = dim_key(vi.name, i, d)
            role = _role_by_name(d.dim_param, i, len(dims)) or _role_by_position(
                dims, i, elem_type)
            if key not in roles or role == BATCH:
                roles[key] = role
    return roles


def _tensor_inputs(model: ModelProto):
    """(input, its dims, its element type) for each fed tensor input."""
    for vi in graph_inputs(model):
        if vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            yield vi, list(tt.shape.dim), tt.elem_type


def _role_by_name(name: str, position: int, rank: int) -> str | None:
    lower = name.lower()
    if not lower:
        return None
    if "batch" in lower or (lower in _BATCH_NAMES and position == 0 and rank >= 2):
        return BATCH
    if lower in _SPATIAL_NAMES or "height" in lower or "width" in lower:
        return SPATIAL
    if any(word in lower for word in _SEQUENCE_WORDS):
        return OTHER
    return None


def _role_by_position(dims: list, position: int, elem_type: int) -> str:
    rank = len(dims)
    if position == 0 and rank >= 2:
        return BATCH
    if elem_type in _FLOAT_TYPES and rank in (4, 5):
        if dims[1].HasField("dim_value") and position >= 2:
            return SPATIAL  # NCHW / NCDHW
        if rank == 4 and dims[3].HasField("dim_value") and position in (1, 2):
            return SPATIAL  # NHWC
    return OTHER


def sequence_symbols(model: ModelProto) -> list[str]:
    """The keys of the ``other``-role dims (sorted): the lengths whose consistent mixes a
    model with a key/value cache needs."""
    return sorted(k for k, role in dim_roles(model).items() if role == OTHER)


def spatial_hints(model: ModelProto) -> tuple[int, ...]:
    """Image sides the model itself suggests: the side whose patches fill a position table
    (ViT: a stride-16 patch convolution and 197 = 14² + 1 positions → 224), or the size a
    ``Resize`` right after the input makes. Empty where it suggests none."""
    roles = dim_roles(model)
    images = {vi.name for vi, dims, _ in _tensor_inputs(model)
              if any(roles.get(dim_key(vi.name, i, d)) == SPATIAL for i, d in enumerate(dims)
                     if not d.HasField("dim_value"))}
    if not images:
        return ()
    constants = _small_constants(model)
    patch, hints = None, []
    for _, node in reached_readers(readers_by_value(model.graph), images,
                                   lambda node, _value: node.op_type in _SIDE_PRESERVING):
        if node.op_type == "Conv" and patch is None:
            strides = _ints(node, "strides")
            patch = strides[0] if strides and len(set(strides)) == 1 else None
        elif node.op_type in ("Resize", "Upsample") and len(node.input) > 3:
            sizes = constants.get(node.input[3])
            if sizes is not None and len(sizes) >= 4 and sizes[-1] > 1:
                hints.append(int(sizes[-1]))
    if patch and patch > 1:
        hints += _position_table_sides(model, patch)
    return tuple(dict.fromkeys(h for h in hints if 8 <= h <= 4096))


def _position_table_sides(model: ModelProto, patch: int) -> list[int]:
    """Sides ``q * patch`` for position tables of ``q²`` or ``q² + 1`` (a class token) rows:
    an initializer ``[1, rows, width]``."""
    sides = []
    for t in model.graph.initializer:
        if len(t.dims) == 3 and t.dims[0] == 1 and t.dims[1] > 1:
            for rows in (t.dims[1], t.dims[1] - 1):
                q = math.isqrt(rows)
                if q >= 2 and q * q == rows:
                    sides.append(q * patch)
                    break
    return sides


def _ints(node: onnx.NodeProto, name: str) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == name), [])


def _small_constants(model: ModelProto) -> dict[str, list[int]]:
    """Integer initializers and ``Constant`` values of up to 8 elements, as lists."""
    out: dict[str, list[int]] = {}
    tensors = [(t.name, t) for t in model.graph.initializer]
    tensors += [(n.output[0], a.t) for n in model.graph.node if n.op_type == "Constant"
                for a in n.attribute if a.name == "value"]
    for name, t in tensors:
        if t.data_type == onnx.TensorProto.INT64 and math.prod(t.dims) <= 8:
            try:
                out[name] = [int(v) for v in numpy_helper.to_array(t).reshape(-1)]
            except (ValueError, TypeError):
                continue  # data left out of the light proto: no hint from it
    return out
