"""Random inputs that a model will accept and that exercise it.

Symbolic dimensions are respected: every use of ``seq`` gets the same size,
and each *size set* picks new sizes (batch 1 then 2; sequence lengths that are
not multiples of common tile sizes). Integer inputs that index an embedding
table (through Gather, possibly after a Cast or Reshape) stay below the table's
size; inputs named like masks get ones with padding zeros at the end of rows,
so attention masking is really exercised.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import ModelProto

from onnxopt.errors import UsageError
from onnxopt.evaluation.sizes import padding_mask
from onnxopt.ir.dtypes import dtype_name, numpy_dtype

BATCH_SIZES = (1, 2)
SEQ_SIZES = (7, 16, 29)
# Tried in turn when the original runs on none of the usual lengths (a reflect Pad or a
# convolution front-end needs a longer input than 7/16/29).
LONGER_SIZES = (64, 128, 256, 512, 1024)
LONG_SEQUENCE = 300  # past the length where length-dependent kernels switch (causal blocks: 256)
_PASS_THROUGH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand"}


def size_sets(count: int) -> list[dict[str, int]]:
    """Assignments of sizes to symbol classes ("batch", everything else) for ``count`` runs."""
    return [{"batch": BATCH_SIZES[i % len(BATCH_SIZES)], "other": SEQ_SIZES[i % len(SEQ_SIZES)]}
            for i in range(count)]


def length_symbols(model: ModelProto) -> list[str]:
    """The symbolic dims of the graph inputs that are not the batch (sorted)."""
    names = {d.dim_param for vi in model.graph.input for d in vi.type.tensor_type.shape.dim
             if d.dim_param and "batch" not in d.dim_param.lower()}
    return sorted(names)


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
    graph = model.graph
    initializer_names = {t.name for t in graph.initializer}
    bounds = _index_bounds(graph)
    feeds: dict[str, np.ndarray] = {}
    symbols: dict[str, int] = dict(overrides or {})
    for vi in graph.input:
        if vi.name in initializer_names:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ValueError(f"input {vi.name}: cannot make random values of a "
                             f"{vi.type.WhichOneof('value') or 'typeless'} input")
        dtype = dtype_name(tt.elem_type)
        if pinned and vi.name in pinned:
            shape = list(pinned[vi.name])
        else:
            shape = []
            for d in tt.shape.dim:
                if d.HasField("dim_value"):
                    shape.append(d.dim_value)
                else:
                    key = d.dim_param or f"?{vi.name}"
                    if key not in symbols:
                        symbols[key] = (sizes["batch"] if "batch" in key.lower()
                                        else sizes["other"])
                    shape.append(symbols[key])
        if flag is not None and dtype == "bool" and int(np.prod(shape)) == 1:
            feeds[vi.name] = np.full(shape, flag, dtype=bool)
            continue
        feeds[vi.name] = _random_tensor(vi.name, dtype, tuple(shape), bounds.get(vi.name), rng)
    return feeds


def _random_tensor(name: str, dtype: str, shape: tuple[int, ...], bound: int | None,
                   rng: np.random.Generator) -> np.ndarray:
    lname = name.lower()
    if "mask" in lname and dtype in ("int64", "int32", "bool", "float32", "float16", "uint8"):
        return padding_mask(shape).astype(numpy_dtype(dtype))
    if dtype in ("float32", "float16", "float64", "bfloat16"):
        return rng.standard_normal(shape).astype(numpy_dtype(dtype))
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        high = bound if bound else 2
        return rng.integers(0, high, size=shape).astype(numpy_dtype(dtype))
    raise ValueError(f"input {name}: cannot make random values of type {dtype}")


def _index_bounds(graph: onnx.GraphProto) -> dict[str, int]:
    """For each graph input that feeds a Gather's indices: the gathered table's size."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, []).append(node)
    dims = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            dims[node.output[0]] = list(node.attribute[0].t.dims)
    bounds: dict[str, int] = {}
    for vi in graph.input:
        frontier, seen = [vi.name], set()
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            for node in consumers.get(name, []):
                if node.op_type in _PASS_THROUGH and node.input[0] == name:
                    frontier.extend(node.output)
                elif node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
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
            with np.load(path, allow_pickle=False) as data:
                feeds = {name: np.asarray(data[name]) for name in data.files}
        except FileNotFoundError:
            raise UsageError(f"{path}: no such file") from None
        except (OSError, ValueError, EOFError) as e:
            raise UsageError(f"{path}: not a NumPy .npz file of input arrays ({e})") from None
        if not feeds:
            raise UsageError(f"{path}: holds no arrays")
        sets.append((path, feeds))
    return sets


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
