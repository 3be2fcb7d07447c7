"""Random inputs that a model will accept and that exercise it.

Symbolic dimensions are respected: every use of ``seq`` gets the same size,
and each *size set* picks new sizes for each dim by its role (:mod:`.dims`): batch 1
then 2; sequence lengths that are not multiples of common tile sizes; image sides the
model suggests, else 32 and 64. Integer inputs that index an embedding
table (through Gather, possibly after a Cast or Reshape) stay below the table's
size; inputs named like masks get ones with padding zeros at the end of the first
row and at the start of the next (and so on), so attention masking is really exercised,
rows whose first queries see no key included.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np
import onnx
from onnx import ModelProto

from onnxopt.errors import UsageError
from onnxopt.evaluation.sizes import padding_mask_both_sides
from onnxopt.ir.dtypes import dtype_name, numpy_dtype
from onnxopt.verification.dims import (
    BATCH,
    OTHER,
    SPATIAL,
    dim_key,
    dim_roles,
    graph_inputs,
    sequence_symbols,
)
from onnxopt.verification.readers import reached_readers, readers_by_value

BATCH_SIZES = (1, 2)
SEQ_SIZES = (7, 16, 29)
SPATIAL_SIZES = (32, 64)  # image sides where the model suggests none: a stride-32 backbone runs
# Tried in turn when the original refuses the image sides of a run (a ViT without a hint of its
# resolution, a backbone that needs more than 64).
LARGER_SIDES = (224, 128, 256, 384, 512)
# Tried in turn when the original runs on none of the usual lengths (a reflect Pad or a
# convolution front-end needs a longer input than 7/16/29).
LONGER_SIZES = (64, 128, 256, 512, 1024)
LONG_SEQUENCE = 300  # past the length where length-dependent kernels switch (causal blocks: 256)
_PASS_THROUGH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand"}


def size_sets(count: int, sides: tuple[int, ...] = SPATIAL_SIZES) -> list[dict[str, int]]:
    """Sizes by role (``batch``, ``other``, ``spatial``) for ``count`` runs. Batch and side
    change on different runs, so that no two of the first four runs are alike."""
    return [{BATCH: BATCH_SIZES[i % len(BATCH_SIZES)], OTHER: SEQ_SIZES[i % len(SEQ_SIZES)],
             SPATIAL: sides[(i + 1) // 2 % len(sides)]} for i in range(count)]


def length_symbols(model: ModelProto) -> list[str]:
    """The symbolic dims of the graph inputs that are lengths (sorted): neither the batch
    nor an image side."""
    return sequence_symbols(model)


def make_inputs(model: ModelProto, sizes: dict[str, int], seed: int = 0,
                overrides: dict[str, int] | None = None,
                pinned: dict[str, tuple[int, ...]] | None = None,
                flag: bool | None = None) -> dict[str, np.ndarray]:
    """Random feeds for every real graph input of ``model``.

    ``overrides`` sizes symbolic dims by name, ``pinned`` gives whole inputs their
    shape (``--shape NAME=DIMS``); a one-element boolean input — a switch between
    ``If`` branches, such as a merged decoder's ``use_cache_branch`` — takes
    ``flag`` (when given), so that runs can cover both branches.
    """
    rng = np.random.default_rng(seed)
    bounds = _index_bounds(model.graph)
    roles = dim_roles(model)
    feeds: dict[str, np.ndarray] = {}
    symbols: dict[str, int] = dict(overrides or {})
    for vi in graph_inputs(model):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ValueError(f"input {vi.name}: cannot make random values of a "
                             f"{vi.type.WhichOneof('value') or 'typeless'} input")
        dtype = dtype_name(tt.elem_type)
        if pinned and vi.name in pinned:
            shape = list(pinned[vi.name])
        else:
            shape = []
            for i, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value"):
                    shape.append(d.dim_value)
                else:
                    key = dim_key(vi.name, i, d)
                    if key not in symbols:
                        symbols[key] = _size_for(roles.get(key, OTHER), sizes)
                    shape.append(symbols[key])
        if flag is not None and dtype == "bool" and int(np.prod(shape)) == 1:
            feeds[vi.name] = np.full(shape, flag, dtype=bool)
            continue
        feeds[vi.name] = _random_tensor(vi.name, dtype, tuple(shape), bounds.get(vi.name), rng)
    return feeds


def _size_for(role: str, sizes: dict[str, int]) -> int:
    """The size of a dim of ``role`` in this size set (the first default where the set gives
    none: callers that know only batch and length)."""
    if role in sizes:
        return sizes[role]
    return {BATCH: BATCH_SIZES[0], SPATIAL: SPATIAL_SIZES[0]}.get(
        role, sizes.get(OTHER, SEQ_SIZES[0]))


def _random_tensor(name: str, dtype: str, shape: tuple[int, ...], bound: int | None,
                   rng: np.random.Generator) -> np.ndarray:
    lname = name.lower()
    if "mask" in lname and dtype in ("int64", "int32", "bool", "float32", "float16", "uint8"):
        return padding_mask_both_sides(shape).astype(numpy_dtype(dtype))
    if dtype in ("float32", "float16", "float64", "bfloat16"):
        return rng.standard_normal(shape).astype(numpy_dtype(dtype))
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        high = bound if bound else 2
        return rng.integers(0, high, size=shape).astype(numpy_dtype(dtype))
    raise ValueError(f"input {name}: cannot make random values of type {dtype}")


def _passes_index_on(node: onnx.NodeProto, value: str) -> bool:
    return node.op_type in _PASS_THROUGH and node.input[0] == value


def _index_bounds(graph: onnx.GraphProto) -> dict[str, int]:
    """For each graph input that feeds a Gather's indices: the gathered table's size."""
    readers = readers_by_value(graph)
    dims = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            dims[node.output[0]] = list(node.attribute[0].t.dims)
    bounds: dict[str, int] = {}
    for vi in graph.input:
        for name, node in reached_readers(readers, [vi.name], _passes_index_on):
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
                table = dims.get(node.input[0])
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                if table:
                    size = table[axis]
                    bounds[vi.name] = min(bounds.get(vi.name, size), size)
    return bounds


def load_input_files(paths: list[str]) -> list[tuple[str, dict[str, np.ndarray]]]:
    """``--inputs FILE.npz`` (one input set per file, arrays named like the model's inputs)."""

    sets = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                loaded = np.load(f, allow_pickle=False)
                if not isinstance(loaded, np.lib.npyio.NpzFile):
                    raise UsageError(f"{path}: a single NumPy array (.npy), not a .npz file of "
                                     "input arrays named like the model's inputs")
                with loaded as data:
                    feeds = {name: np.asarray(data[name]) for name in data.files}
        except FileNotFoundError:
            raise UsageError(f"{path}: no such file") from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise UsageError(f"{path}: not a NumPy .npz file of input arrays "
                             f"({_one_line(e)})") from None
        if not feeds:
            raise UsageError(f"{path}: holds no arrays")
        sets.append((path, feeds))
    return sets


def save_input_files(directory: str, sets: list[dict[str, np.ndarray]]) -> list[str]:
    """Write each input set to ``directory/runN.npz`` (N from 1; arrays named like the
    inputs, so ``--inputs`` reads them back), each file written whole and then renamed into
    place; the paths written."""
    paths = []
    try:
        os.makedirs(directory, exist_ok=True)
        for k, feeds in enumerate(sets, start=1):
            path = os.path.join(directory, f"run{k}.npz")
            write_npz(path, feeds)
            paths.append(path)
    except OSError as e:
        raise UsageError(f"--save-inputs {directory}: cannot write: {e.strerror or e}") from None
    return paths


def write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """An ``.npz`` of ``arrays`` under their own names. ``np.savez`` takes names as keyword
    arguments, so an input called ``file`` or ``allow_pickle`` could not be saved by it."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for name, array in arrays.items():
                with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:200] or type(e).__name__


def parse_shapes(entries: list[str]) -> dict[str, tuple[int, ...]]:
    """``--shape NAME=DIMS`` entries: ``input_ids=1x128`` (or ``1,128``) pins an input's
    shape, ``seq=128`` a symbolic dimension."""

    out: dict[str, tuple[int, ...]] = {}
    for entry in entries:
        name, sep, dims = entry.partition("=")
        parts = dims.replace("x", ",").split(",") if dims else []
        if not sep or not name or not parts or not all(p.strip().isdigit() for p in parts):
            raise UsageError(f"--shape {entry}: expected NAME=DIMS, e.g. input_ids=1x128 or "
                             "seq=128")
        out[name] = tuple(int(p) for p in parts)
    return out


def split_shapes(shapes: dict[str, tuple[int, ...]], proto: ModelProto
                 ) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """``--shape`` entries as whole-input shapes (NAME is a graph input) and sizes of named
    symbolic dims (NAME is a dim's name). An input's shape also sizes its symbolic dims, for
    every input that shares them (``input_ids=1x64`` makes ``attention_mask[batch, seq]``
    1x64 too). Anything else, a size that contradicts the model's fixed dims or another
    entry, is a usage error."""
    inputs = {vi.name: vi for vi in graph_inputs(proto)}
    named = {key for key in dim_roles(proto) if not key.startswith("?")}
    pinned: dict[str, tuple[int, ...]] = {}
    overrides: dict[str, int] = {}
    said_by: dict[str, str] = {}
    for name, dims in shapes.items():
        if name in inputs:
            continue
        if name not in named or len(dims) != 1:
            known = ", ".join(sorted(inputs) + sorted(named))
            raise UsageError(f"--shape {name}: neither an input of the model nor one of its "
                             f"symbolic dims (one size) ({known})")
        overrides[name], said_by[name] = dims[0], f"--shape {name}={dims[0]}"
    for name, dims in shapes.items():
        if name not in inputs:
            continue
        model_dims = list(inputs[name].type.tensor_type.shape.dim)
        if model_dims and len(dims) != len(model_dims):
            raise UsageError(f"--shape {name}: {len(dims)} dims given, the input has "
                             f"{len(model_dims)}")
        for i, (d, size) in enumerate(zip(model_dims, dims)):
            if d.HasField("dim_value") and d.dim_value != size:
                raise UsageError(f"--shape {name}: dim {i} is {d.dim_value} in the model, "
                                 f"{size} given")
            if d.dim_param and overrides.setdefault(d.dim_param, size) != size:
                raise UsageError(f"--shape {name}: {d.dim_param} is {size} here but "
                                 f"{overrides[d.dim_param]} by {said_by[d.dim_param]}")
            said_by.setdefault(d.dim_param, f"--shape {name}")
        pinned[name] = tuple(dims)
    return pinned, overrides
