"""The model the checks load where no staged file holds the result's weights: the graph whole,
each large floating-point weight a reference of the same type, shape and length into one
sparse file of zeros (its *stand-in*).

A result whose weights lie in the input's external data (every LLM export: 13 GB for a
7B model in float16) has no file of its own until the writer streams that data to the output,
and a result of the safeguard's search is never written at all. Loading such a result with
its weights costs their size (read, then handed to ONNX Runtime), so the checks used to be
skipped above 16 MB of external data or 256 MB inline — for every model that matters.

What the checks prove does not depend on a float weight's values. The ONNX checker reads a
weight's type, shape and where its data lies; ONNX Runtime resolves the graph, infers and
checks every type and shape, runs its graph optimizations, makes every kernel, and checks
each initializer's data length against its type and shape. External data it maps rather
than reads (ORT 1.31 on CPU: a 2 GB float32 model loads in 0.01 s with a 53 MB peak,
benchmarks/RESULTS.md), so a weight nothing computes with at load costs no memory at all.

What can decide a load by its values stays as it is: integer and boolean tensors (ORT refuses
an integer ``Div`` by a constant zero when it makes the kernel) and small tensors (shape
vectors, axes, scales, epsilons: shape inference and ORT's fusions read them) keep their
bytes, read where the result keeps them. A float weight computed with at load (constant
folding) is computed on zeros, which refuses nothing that its values would load.

Only main-graph initializers are stood in (subgraph weights are small in the models this is
for, and stay in the copy as they are).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile

from onnx import ModelProto, TensorProto, helper

from onnxopt.exporter.save import EXTERNAL_MARK
from onnxopt.exporter.serialize import copy_field, copy_without, model_bytes
from onnxopt.importer.wire import STRIPPED_MIN_BYTES
from onnxopt.ir.tensor import LazyTensor

MODEL_NAME = "model.onnx"
STAND_IN_NAME = "stand-in.zeros"
FOLDER_PREFIX = "onnxopt-checks-"
# The data types whose values no load depends on (floats of every width).
FLOAT_TYPES = frozenset(getattr(TensorProto, name) for name in (
    "FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
    "FLOAT8E5M2FNUZ", "FLOAT4E2M1") if hasattr(TensorProto, name))
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                 "uint64_data")


class StandInCopy:
    """A stand-in copy written to a folder of its own: ``path`` is the model; :meth:`discard`
    removes the folder."""

    def __init__(self, folder: str, stood_in: int) -> None:
        self.folder = folder
        self.path = os.path.join(folder, MODEL_NAME)
        self.stood_in = stood_in  # how many weights the stand-in holds the place of

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def write_stand_in_copy(proto: ModelProto, external: dict[str, LazyTensor] | None = None,
                        left_out: dict[int, memoryview] | None = None, *,
                        parent: str | None = None) -> StandInCopy:
    """Write the stand-in copy of ``proto`` (``external``: its exporter placeholders' sources;
    ``left_out``: raw data its main-graph initializers lack, by position) in a new folder
    under ``parent`` (default: the system's temporary folder). Raises ``OSError`` where it
    cannot be written (nothing is left behind)."""
    external = external or {}
    left_out = left_out or {}
    initializers: list[TensorProto] = []
    longest = 0
    for position, t in enumerate(proto.graph.initializer):
        light, length = _light(t, external, left_out.get(position))
        initializers.append(light)
        if length is not None:
            longest = max(longest, length)
    stood_in = sum(1 for t in initializers if _references_stand_in(t))
    graph = copy_without(proto.graph, "initializer")
    graph.initializer.extend(initializers)
    model = copy_without(proto, "graph")
    model.graph.CopyFrom(graph)
    folder = tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=parent)
    copy = StandInCopy(folder, stood_in)
    try:
        with open(os.path.join(folder, STAND_IN_NAME), "xb") as f:
            f.truncate(longest)  # a hole: no disk, and zeros wherever it is read
        with open(copy.path, "xb") as f:
            f.write(model_bytes(model))
    except BaseException:
        copy.discard()
        raise
    return copy


def _light(t: TensorProto, external: dict[str, LazyTensor], raw: memoryview | None
           ) -> tuple[TensorProto, int | None]:
    """``t`` as the copy holds it, and the stand-in's length it needs (``None``: none)."""
    floating = t.data_type in FLOAT_TYPES
    if t.data_location == TensorProto.EXTERNAL:
        source = external.get(t.name) if _is_placeholder(t) else None
        length = _source_length(source) if source is not None else _declared_length(t)
        if source is not None and (not floating or length < STRIPPED_MIN_BYTES):
            whole = _described(t)
            whole.raw_data = b"".join(source.raw_chunks())
            return whole, None
        # A float weight, or data the copy's folder cannot reach (an external reference the
        # result kept from elsewhere): its type, shape and length are what is checked.
        return _stood_in(t, length), length
    if raw is not None:  # its raw data left out of the message (the input file's bytes)
        if floating:
            return _stood_in(t, len(raw)), len(raw)
        whole = _described(t)
        whole.raw_data = bytes(raw)
        return whole, None
    if floating and t.HasField("raw_data") and not any(len(getattr(t, f)) for f in _TYPED_FIELDS):
        length = len(t.raw_data)  # (a copy of the bytes, dropped at once)
        if length >= STRIPPED_MIN_BYTES:
            return _stood_in(t, length), length
    return t, None


def _stood_in(t: TensorProto, length: int) -> TensorProto:
    light = _described(t)
    light.data_location = TensorProto.EXTERNAL
    for key, value in (("location", STAND_IN_NAME), ("offset", "0"), ("length", str(length))):
        light.external_data.add(key=key, value=value)
    return light


def _described(t: TensorProto) -> TensorProto:
    """``t`` without its data: every field it sets but the numbers and where they lie (read
    field by field: listing them would copy the raw data)."""
    skipped = {"raw_data", "external_data", "data_location", *_TYPED_FIELDS}
    light = TensorProto()
    for field in t.DESCRIPTOR.fields:
        if field.name in skipped or (not field.is_repeated and not t.HasField(field.name)):
            continue
        copy_field(light, field, getattr(t, field.name))
    return light


def _is_placeholder(t: TensorProto) -> bool:
    return any(e.key == "location" and e.value == EXTERNAL_MARK for e in t.external_data)


def _references_stand_in(t: TensorProto) -> bool:
    return any(e.key == "location" and e.value == STAND_IN_NAME for e in t.external_data)


def _source_length(source: LazyTensor) -> int:
    """The bytes the writer will copy for a placeholder: its source's recorded length, else
    what its type and shape need."""
    loc = source.external
    return loc.length if loc is not None and loc.length is not None else source.nbytes


def _declared_length(t: TensorProto) -> int:
    info = {e.key: e.value for e in t.external_data}
    try:
        if info.get("length"):
            return int(info["length"])
    except ValueError:
        pass
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return 0  # a type without a size: ORT says what it makes of it
    return math.prod(t.dims) * itemsize


