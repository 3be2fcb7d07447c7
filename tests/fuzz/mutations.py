"""Mutation operators on ONNX models, for the fuzzer.

Why: real models reach onnxopt damaged or in unusual but legal spellings (hand
edits, other exporters, truncated downloads). Each operator below makes one
small, named change and returns a *new* model (the argument is never touched),
or ``None`` where it does not apply. Some operators break the model (onnxopt must
then exit 1 with one line); others keep it valid (a renamed value, a shuffled node
order, an intermediate made a graph output) and so also test that onnxopt still
computes the same function.

Proto operators take ``(model, rng)``; byte operators take ``(data, rng)`` and work
on the serialized file. :func:`mutate` applies 1–3 of them, and records each step
with its own seed so that :func:`replay` can rebuild a mutant (or a subset of its
steps) exactly.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, helper

ProtoMutation = Callable[[ModelProto, random.Random], "ModelProto | None"]
ByteMutation = Callable[[bytes, random.Random], "bytes | None"]

PROTO_MUTATIONS: dict[str, ProtoMutation] = {}
BYTE_MUTATIONS: dict[str, ByteMutation] = {}
WEIGHTS: dict[str, float] = {}

INTERESTING_INTS = (-(2**63), -(2**31), -3, -2, -1, 0, 1, 2, 3, 4, 7, 64, 2**31 - 1, 2**63 - 1)
INTERESTING_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, -1e30, math.inf, -math.inf,
                      math.nan, 3.4e38, 1e-45)
WEIRD_NAMES = ("", " ", "x", "0", "a/b:0", "名前", "\u00e9\u00e8", "onnx::Add_0", "/", "..",
               "a" * 300, "input_ids", "logits", "x y", "%1", "\t")
ENUM_STRINGS = ("", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "constant", "reflect", "edge",
                "none", "tanh", "nearest", "linear", "cubic", "DCR", "CRD", "garbage")


def proto_mutation(weight: float = 1.0) -> Callable[[ProtoMutation], ProtoMutation]:
    def register(fn: ProtoMutation) -> ProtoMutation:
        PROTO_MUTATIONS[fn.__name__] = fn
        WEIGHTS[fn.__name__] = weight
        return fn
    return register


def byte_mutation(weight: float = 1.0) -> Callable[[ByteMutation], ByteMutation]:
    def register(fn: ByteMutation) -> ByteMutation:
        BYTE_MUTATIONS[fn.__name__] = fn
        WEIGHTS[fn.__name__] = weight
        return fn
    return register


# ----------------------------------------------------------------------------- helpers


def copy_model(model: ModelProto) -> ModelProto:
    out = ModelProto()
    out.CopyFrom(model)
    return out


def all_graphs(graph: GraphProto) -> Iterator[GraphProto]:
    """``graph`` and every subgraph (If/Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                yield from all_graphs(attr.g)
            for sub in attr.graphs:
                yield from all_graphs(sub)


def pick_graph(model: ModelProto, rng: random.Random, need_nodes: bool = True) -> GraphProto:
    """The main graph most of the time, otherwise a random subgraph."""
    graphs = [g for g in all_graphs(model.graph) if g.node or not need_nodes]
    if not graphs:
        return model.graph
    if len(graphs) > 1 and rng.random() < 0.5:
        return rng.choice(graphs[1:])
    return graphs[0]


def produced(graph: GraphProto) -> list[str]:
    return [o for n in graph.node for o in n.output if o]


def known_names(graph: GraphProto) -> list[str]:
    """Every value name visible in ``graph`` itself (inputs, initializers, node outputs)."""
    names = [i.name for i in graph.input] + [t.name for t in graph.initializer] + produced(graph)
    return list(dict.fromkeys(n for n in names if n))


def opset_of(model: ModelProto, domain: str = "") -> int | None:
    for imp in model.opset_import:
        if imp.domain in ((domain, "ai.onnx") if domain == "" else (domain,)):
            return imp.version
    return None


def rename_everywhere(graph: GraphProto, old: str, new: str) -> None:
    """Rename value ``old`` to ``new`` in ``graph`` and in the subgraphs that capture it."""
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if vi.name == old:
            vi.name = new
    for t in graph.initializer:
        if t.name == old:
            t.name = new
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for i, name in enumerate(node.output):
            if name == old:
                node.output[i] = new
        for attr in node.attribute:
            subs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                if old not in {i.name for i in sub.input} | {t.name for t in sub.initializer}:
                    rename_everywhere(sub, old, new)


def inferred_types(model: ModelProto) -> dict[str, onnx.TypeProto]:
    """Types of the main graph's values from ONNX shape inference (empty where it fails)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - a broken mutant: no types
        return {}
    g = inferred.graph
    return {vi.name: vi.type for vi in list(g.value_info) + list(g.input) + list(g.output)}


def tensor_array(t: TensorProto) -> np.ndarray | None:
    try:
        return onnx.numpy_helper.to_array(t)
    except Exception:  # noqa: BLE001 - an already broken tensor
        return None


def replace_tensor(t: TensorProto, array: np.ndarray) -> None:
    new = onnx.numpy_helper.from_array(array, t.name)
    t.CopyFrom(new)


def nodes_with(graph: GraphProto, pred: Callable[[NodeProto], bool]) -> list[NodeProto]:
    return [n for n in graph.node if pred(n)]


def attrs_of_type(model: ModelProto, kind: int, rng: random.Random
                  ) -> tuple[NodeProto, AttributeProto] | None:
    graph = pick_graph(model, rng)
    cands = [(n, a) for n in graph.node for a in n.attribute if a.type == kind]
    return rng.choice(cands) if cands else None


def fresh_name(graph: GraphProto, base: str) -> str:
    names = set(known_names(graph))
    i = 0
    while f"{base}_{i}" in names:
        i += 1
    return f"{base}_{i}"


# ----------------------------------------------------------------------------- attributes


@proto_mutation(2.0)
def attr_int(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An INT attribute (axis, keepdims, to, transB, ...) set to an interesting value."""
    m = copy_model(model)
    hit = attrs_of_type(m, AttributeProto.INT, rng)
    if hit is None:
        return None
    _, attr = hit
    attr.i = rng.choice(INTERESTING_INTS + (attr.i + 1, attr.i - 1, -attr.i))
    return m


@proto_mutation(1.5)
def attr_float(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A FLOAT attribute (epsilon, alpha, value_float) set to 0, inf, NaN, denormal..."""
    m = copy_model(model)
    hit = attrs_of_type(m, AttributeProto.FLOAT, rng)
    if hit is None:
        return None
    _, attr = hit
    attr.f = rng.choice(INTERESTING_FLOATS + (attr.f * 2, -attr.f))
    return m


@proto_mutation(1.0)
def attr_string(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A STRING attribute (mode, auto_pad, direction) replaced, emptied or made non-UTF-8."""
    m = copy_model(model)
    hit = attrs_of_type(m, AttributeProto.STRING, rng)
    if hit is None:
        return None
    _, attr = hit
    choice = rng.randrange(4)
    if choice == 0:
        attr.s = rng.choice(ENUM_STRINGS).encode()
    elif choice == 1:
        attr.s = attr.s.upper() if attr.s != attr.s.upper() else attr.s.lower()
    elif choice == 2:
        attr.s = b"\xff\xfe" + attr.s
    else:
        attr.s = attr.s + b"\x00"
    return m


@proto_mutation(2.0)
def attr_ints(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An INTS attribute (perm, axes, pads, kernel_shape, shape) shuffled, shortened,
    lengthened, negated, duplicated or pushed out of range."""
    m = copy_model(model)
    hit = attrs_of_type(m, AttributeProto.INTS, rng)
    if hit is None:
        return None
    _, attr = hit
    vals = list(attr.ints)
    op = rng.randrange(7)
    if op == 0 and len(vals) > 1:
        rng.shuffle(vals)
    elif op == 1 and vals:
        vals.pop(rng.randrange(len(vals)))
    elif op == 2:
        vals.append(rng.choice(vals) if vals and rng.random() < 0.5 else rng.randrange(-2, 5))
    elif op == 3 and vals:
        i = rng.randrange(len(vals))
        vals[i] = -vals[i] - 1 if rng.random() < 0.5 else -vals[i]
    elif op == 4 and vals:
        vals[rng.randrange(len(vals))] = rng.choice(INTERESTING_INTS)
    elif op == 5:
        vals = []
    else:
        vals = vals[::-1]
    del attr.ints[:]
    attr.ints.extend(vals)
    return m


@proto_mutation(0.5)
def attr_floats(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A FLOATS attribute (scales, ml coefficients) emptied or given a special value."""
    m = copy_model(model)
    hit = attrs_of_type(m, AttributeProto.FLOATS, rng)
    if hit is None:
        return None
    _, attr = hit
    vals = list(attr.floats)
    if vals and rng.random() < 0.6:
        vals[rng.randrange(len(vals))] = rng.choice(INTERESTING_FLOATS)
    else:
        vals = vals[:-1] if vals else [1.0]
    del attr.floats[:]
    attr.floats.extend(vals)
    return m


@proto_mutation(1.0)
def attr_remove(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A random attribute deleted (falls back to the default, or is required)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    cands = [n for n in graph.node if n.attribute]
    if not cands:
        return None
    node = rng.choice(cands)
    del node.attribute[rng.randrange(len(node.attribute))]
    return m


@proto_mutation(1.0)
def attr_add(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An attribute added: an unknown name, or a real one (axis, perm, ...) on the wrong op."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    if not graph.node:
        return None
    node = rng.choice(graph.node)
    name = rng.choice(["axis", "keepdims", "perm", "axes", "to", "epsilon", "bogus", "transA",
                       "allowzero", "mode", "noop_with_empty_axes", "stash_type"])
    existing = {a.name for a in node.attribute}
    if name in existing:
        return None
    value = rng.choice([0, 1, -1, 2, [1, 0], [0], 1e-5, "x", [0.5]])
    node.attribute.append(helper.make_attribute(name, value))
    return m


@proto_mutation(1.0)
def attr_type(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An attribute's declared type changed while its payload stays (INT read as FLOAT...)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    cands = [a for n in graph.node for a in n.attribute]
    if not cands:
        return None
    attr = rng.choice(cands)
    types = [AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING, AttributeProto.INTS,
             AttributeProto.FLOATS, AttributeProto.TENSOR, AttributeProto.UNDEFINED,
             AttributeProto.GRAPH]
    attr.type = rng.choice([t for t in types if t != attr.type])
    return m


@proto_mutation(0.6)
def attr_duplicate(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An attribute listed twice on the same node, the copy with another value."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    cands = [(n, a) for n in graph.node for a in n.attribute
             if a.type in (AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.INTS)]
    if not cands:
        return None
    node, attr = rng.choice(cands)
    dup = node.attribute.add()
    dup.CopyFrom(attr)
    if dup.type == AttributeProto.INT:
        dup.i += 1
    elif dup.type == AttributeProto.FLOAT:
        dup.f += 1.0
    else:
        dup.ints.append(0)
    return m


@proto_mutation(0.8)
def attr_tensor(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A TENSOR attribute (Constant value, ConstantOfShape value) changed in dtype, dims or
    data."""
    m = copy_model(model)
    hit = attrs_of_type(m, AttributeProto.TENSOR, rng)
    if hit is None:
        return None
    _, attr = hit
    return m if corrupt_tensor(attr.t, rng) else None


@proto_mutation(0.7)
def constant_variant(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A Constant node respelled with value_float(s)/value_int(s) where its tensor allows it
    (valid: the same value), or with two value attributes (invalid)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    cands = [n for n in graph.node if n.op_type == "Constant" and len(n.attribute) == 1
             and n.attribute[0].name == "value"]
    if not cands:
        return None
    node = rng.choice(cands)
    arr = tensor_array(node.attribute[0].t)
    if arr is None:
        return None
    if rng.random() < 0.3:
        node.attribute.append(helper.make_attribute("value_float", 1.0))
        return m
    if arr.dtype == np.float32 and arr.ndim <= 1:
        attr = ("value_float", float(arr)) if arr.ndim == 0 else ("value_floats",
                                                                   [float(x) for x in arr])
    elif arr.dtype == np.int64 and arr.ndim <= 1:
        attr = ("value_int", int(arr)) if arr.ndim == 0 else ("value_ints", [int(x) for x in arr])
    else:
        return None
    del node.attribute[:]
    node.attribute.append(helper.make_attribute(*attr))
    return m


# ----------------------------------------------------------------------------- node inputs


@proto_mutation(2.0)
def swap_inputs(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Two inputs of one node swapped (Sub(a, b) -> Sub(b, a), MatMul operands...)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    cands = [n for n in graph.node if len(n.input) >= 2]
    if not cands:
        return None
    node = rng.choice(cands)
    i, j = rng.sample(range(len(node.input)), 2)
    node.input[i], node.input[j] = node.input[j], node.input[i]
    return m


@proto_mutation(2.5)
def empty_input(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An input given as the empty name "" (an omitted optional input — or a required one)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    cands = [n for n in graph.node if n.input]
    if not cands:
        return None
    node = rng.choice(cands)
    i = len(node.input) - 1 if rng.random() < 0.5 else rng.randrange(len(node.input))
    node.input[i] = ""
    return m


@proto_mutation(1.5)
def trailing_empty_inputs(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Empty names "" appended after the last input (legal: omitted trailing optionals)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    if not graph.node:
        return None
    node = rng.choice(graph.node)
    node.input.extend([""] * rng.randint(1, 3))
    return m


@proto_mutation(1.0)
def trailing_empty_outputs(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An output given as "" (an unused optional output, e.g. of Dropout or LayerNorm)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    if not graph.node:
        return None
    node = rng.choice(graph.node)
    if len(node.output) > 1 and rng.random() < 0.5:
        node.output[rng.randrange(1, len(node.output))] = ""
    else:
        node.output.append("")
    return m


@proto_mutation(1.0)
def extra_input(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """One more input on a node (an existing value): too many inputs, or an optional one."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    names = known_names(graph)
    if not graph.node or not names:
        return None
    node = rng.choice(graph.node)
    node.input.append(rng.choice(names))
    return m


@proto_mutation(1.0)
def drop_input(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """The last input of a node removed (an optional one, or a required one)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    cands = [n for n in graph.node if n.input]
    if not cands:
        return None
    node = rng.choice(cands)
    del node.input[-1]
    return m


@proto_mutation(1.5)
def rewire_input(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An input pointed at another value: a wrong shape or dtype, a later value (unsorted
    graph) or the node's own output (a cycle)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    names = known_names(graph)
    cands = [n for n in graph.node if n.input]
    if not cands or not names:
        return None
    node = rng.choice(cands)
    i = rng.randrange(len(node.input))
    node.input[i] = rng.choice(names + list(node.output))
    return m


@proto_mutation(1.0)
def dangling_input(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An input naming a value that nothing defines."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    cands = [n for n in graph.node if n.input]
    if not cands:
        return None
    node = rng.choice(cands)
    node.input[rng.randrange(len(node.input))] = rng.choice(["nowhere", "x y", "名前", "0"])
    return m


# ----------------------------------------------------------------------------- initializers


def corrupt_tensor(t: TensorProto, rng: random.Random) -> bool:
    """One of: special values, dims changed, dtype changed, raw data resized, data moved
    between raw_data and the typed field. Returns False if nothing applied."""
    op = rng.randrange(6)
    arr = tensor_array(t)
    if op == 0 and arr is not None and arr.size and arr.dtype.kind in "fiub":
        arr = arr.copy()
        flat = arr.reshape(-1)
        if arr.dtype.kind == "f":
            vals = [v for v in INTERESTING_FLOATS if not (arr.dtype == np.float16 and abs(v) > 6e4)]
        elif arr.dtype.kind == "b":
            vals = [True, False]
        else:
            info = np.iinfo(arr.dtype)
            vals = [v for v in INTERESTING_INTS if info.min <= v <= info.max]
        count = rng.choice([1, max(1, flat.size // 10), flat.size])
        for i in rng.sample(range(flat.size), count):
            flat[i] = rng.choice(vals)
        replace_tensor(t, arr)
        return True
    if op == 1:
        dims = list(t.dims)
        if dims and rng.random() < 0.5:
            dims[rng.randrange(len(dims))] = rng.choice([0, 1, 2, dims[0] + 1, -1, 2**40])
        elif dims and rng.random() < 0.5:
            dims.pop(rng.randrange(len(dims)))
        else:
            dims.insert(rng.randrange(len(dims) + 1), rng.choice([1, 2]))
        del t.dims[:]
        t.dims.extend(dims)
        return True
    if op == 2:
        t.data_type = rng.choice([c for c in (1, 2, 3, 6, 7, 9, 10, 11, 16, 8, 0, 99, 17, 22)
                                  if c != t.data_type])
        return True
    if op == 3 and t.raw_data:
        cut = rng.choice([1, 2, 3, len(t.raw_data) // 2, len(t.raw_data)])
        t.raw_data = t.raw_data[:-cut] if rng.random() < 0.6 else t.raw_data + b"\x00" * cut
        return True
    if op == 4 and arr is not None and t.raw_data and arr.dtype in (np.float32, np.int64,
                                                                   np.int32, np.float64):
        # Valid: the same values in the typed field instead of raw_data.
        t.ClearField("raw_data")
        field = {np.dtype(np.float32): "float_data", np.dtype(np.int64): "int64_data",
                 np.dtype(np.int32): "int32_data", np.dtype(np.float64): "double_data"}
        getattr(t, field[arr.dtype]).extend(arr.reshape(-1).tolist())
        return True
    if op == 5 and arr is not None and arr.size:
        # The same values under other dims (flattened, or a leading 1 added).
        new = arr.reshape(-1) if arr.ndim != 1 else arr.reshape(1, -1)
        replace_tensor(t, new)
        return True
    return False


def pick_initializer(model: ModelProto, rng: random.Random) -> TensorProto | None:
    graph = pick_graph(model, rng, need_nodes=False)
    inits = list(graph.initializer) or list(model.graph.initializer)
    return rng.choice(inits) if inits else None


@proto_mutation(3.0)
def init_corrupt(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An initializer's values, dims, dtype or raw_data length changed."""
    m = copy_model(model)
    t = pick_initializer(m, rng)
    if t is None:
        return None
    return m if corrupt_tensor(t, rng) else None


@proto_mutation(1.5)
def init_raw_length(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """raw_data one element short or long of what dims x dtype need."""
    m = copy_model(model)
    cands = [t for g in all_graphs(m.graph) for t in g.initializer if t.raw_data]
    if not cands:
        return None
    t = rng.choice(cands)
    t.raw_data = t.raw_data[:-1] if rng.random() < 0.5 else t.raw_data + b"\x01"
    return m


@proto_mutation(1.0)
def init_typed_data(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: an initializer's bytes moved from raw_data to the typed field (float_data...)."""
    m = copy_model(model)
    cands = [t for t in m.graph.initializer if t.raw_data and t.data_type in (1, 6, 7, 11)]
    if not cands:
        return None
    t = rng.choice(cands)
    arr = tensor_array(t)
    if arr is None or arr.size > 200_000:
        return None
    t.ClearField("raw_data")
    field = {1: "float_data", 6: "int32_data", 7: "int64_data", 11: "double_data"}[t.data_type]
    getattr(t, field).extend(arr.reshape(-1).tolist())
    return m


@proto_mutation(1.0)
def init_remove(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An initializer deleted (its users now read an undefined value)."""
    m = copy_model(model)
    graph = pick_graph(m, rng, need_nodes=False)
    if not graph.initializer:
        return None
    del graph.initializer[rng.randrange(len(graph.initializer))]
    return m


@proto_mutation(0.8)
def init_duplicate(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Two initializers with the same name (the copy with other values)."""
    m = copy_model(model)
    if not m.graph.initializer:
        return None
    t = rng.choice(m.graph.initializer)
    dup = m.graph.initializer.add()
    dup.CopyFrom(t)
    arr = tensor_array(dup)
    if arr is not None and arr.dtype.kind == "f":
        replace_tensor(dup, (arr + 1).astype(arr.dtype))
    return m


@proto_mutation(1.0)
def init_as_input(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: an initializer also listed as a graph input (an overridable default, IR >= 4)."""
    m = copy_model(model)
    inputs = {i.name for i in m.graph.input}
    cands = [t for t in m.graph.initializer if t.name not in inputs]
    if not cands:
        return None
    t = rng.choice(cands)
    m.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return m


@proto_mutation(0.8)
def init_to_constant(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: an initializer turned into a Constant node at the top of the graph."""
    m = copy_model(model)
    if not m.graph.initializer:
        return None
    i = rng.randrange(len(m.graph.initializer))
    t = TensorProto()
    t.CopyFrom(m.graph.initializer[i])
    del m.graph.initializer[i]
    node = helper.make_node("Constant", [], [t.name], value=t, name=f"fuzz_const_{i}")
    m.graph.node.insert(0, node)
    return m


@proto_mutation(0.6)
def init_sparse(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: a small float initializer stored as a sparse_initializer instead."""
    m = copy_model(model)
    cands = [t for t in m.graph.initializer if t.data_type == 1 and 0 < np.prod(t.dims) < 4096]
    if not cands:
        return None
    t = rng.choice(cands)
    arr = tensor_array(t)
    if arr is None:
        return None
    flat = arr.reshape(-1)
    idx = np.nonzero(flat)[0].astype(np.int64)
    values = onnx.numpy_helper.from_array(flat[idx], t.name)
    indices = onnx.numpy_helper.from_array(idx, f"{t.name}_indices")
    sparse = helper.make_sparse_tensor(values, indices, list(arr.shape))
    m.graph.initializer.remove(t)
    m.graph.sparse_initializer.append(sparse)
    return m


@proto_mutation(0.8)
def init_huge_dims(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An initializer claiming huge dims with no data (must not be allocated)."""
    m = copy_model(model)
    t = pick_initializer(m, rng)
    if t is None:
        return None
    del t.dims[:]
    t.dims.extend(rng.choice([[2**31, 2**31], [2**62], [10**6, 10**6, 10**6], [-5, 3]]))
    return m


@proto_mutation(1.0)
def init_external(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An initializer marked as external data that is missing, absolute, outside the folder,
    or has a bad offset/length."""
    m = copy_model(model)
    t = pick_initializer(m, rng)
    if t is None:
        return None
    location = rng.choice(["missing.bin", "/etc/passwd", "../x.bin", "sub/../../x.bin",
                           "C:\\x.bin", "", "model.onnx"])
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    for key, value in (("location", location), ("offset", rng.choice(["0", "-8", "x", "4"])),
                       ("length", rng.choice(["", "4", "-1", str(2**40)]))):
        if value:
            entry = t.external_data.add()
            entry.key, entry.value = key, value
    return m


@proto_mutation(0.5)
def segment_field(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """An initializer given a `segment` (chunked tensors, unsupported everywhere)."""
    m = copy_model(model)
    t = pick_initializer(m, rng)
    if t is None:
        return None
    t.segment.begin, t.segment.end = 0, 1
    return m


# ----------------------------------------------------------------------------- nodes


def consumers(graph: GraphProto, name: str) -> list[NodeProto]:
    return [n for n in graph.node if name in n.input]


@proto_mutation(2.0)
def delete_node(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A node deleted; its outputs are left undefined."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    if not graph.node:
        return None
    del graph.node[rng.randrange(len(graph.node))]
    return m


@proto_mutation(2.0)
def bypass_node(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A node deleted and its users wired to its first input (often still valid: a Cast,
    Identity, Dropout or Relu skipped)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    cands = [n for n in graph.node if n.input and n.input[0] and n.output]
    if not cands:
        return None
    node = rng.choice(cands)
    source, out = node.input[0], node.output[0]
    graph.node.remove(node)
    if out in {o.name for o in graph.output}:
        return None
    rename_uses(graph, out, source)
    return m


def rename_uses(graph: GraphProto, old: str, new: str) -> None:
    for n in graph.node:
        for i, name in enumerate(n.input):
            if name == old:
                n.input[i] = new
        for attr in n.attribute:
            for sub in ([attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)):
                rename_uses(sub, old, new)


@proto_mutation(1.0)
def duplicate_node(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A node duplicated: with the same outputs (two producers of one value), or with renamed
    outputs (valid dead code)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    if not graph.node:
        return None
    i = rng.randrange(len(graph.node))
    dup = NodeProto()
    dup.CopyFrom(graph.node[i])
    if rng.random() < 0.5:
        for k, out in enumerate(dup.output):
            if out:
                dup.output[k] = fresh_name(graph, out)
    graph.node.insert(i + 1, dup)
    return m


@proto_mutation(1.5)
def shuffle_nodes(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Node order shuffled or reversed (not topologically sorted; ONNX Runtime sorts)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    if len(graph.node) < 2:
        return None
    nodes = list(graph.node)
    if rng.random() < 0.5:
        nodes.reverse()
    else:
        rng.shuffle(nodes)
    del graph.node[:]
    graph.node.extend(nodes)
    return m


@proto_mutation(1.0)
def node_op_type(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A node's op type replaced by a sibling (Add->Sub, Relu->Sigmoid, Softmax->LogSoftmax,
    ReduceMean->ReduceMax) or by a made-up op."""
    siblings = [("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"),
                ("Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Sqrt", "Exp", "Erf", "Identity",
                 "Reciprocal"),
                ("Softmax", "LogSoftmax", "Hardmax"),
                ("ReduceMean", "ReduceMax", "ReduceSum", "ReduceMin", "ReduceProd"),
                ("MatMul", "Mul", "Add"), ("Reshape", "Expand", "Tile")]
    m = copy_model(model)
    graph = pick_graph(m, rng)
    if not graph.node:
        return None
    node = rng.choice(graph.node)
    for group in siblings:
        if node.op_type in group and rng.random() < 0.85:
            node.op_type = rng.choice([g for g in group if g != node.op_type])
            return m
    node.op_type = rng.choice(["FuzzOp", "", "add", node.op_type + "2"])
    return m


@proto_mutation(1.0)
def node_domain(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A node moved to another domain: com.microsoft, ai.onnx.ml, an undeclared one, or
    "ai.onnx" (valid: the ONNX domain's other name)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    if not graph.node:
        return None
    node = rng.choice(graph.node)
    node.domain = rng.choice(["com.microsoft", "ai.onnx.ml", "custom.fuzz", "ai.onnx",
                              "ai.onnxopt.cuda"])
    return m


@proto_mutation(1.0)
def duplicate_node_name(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Two nodes given the same name, or every node the empty name (both legal)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    if len(graph.node) < 2:
        return None
    if rng.random() < 0.3:
        for node in graph.node:
            node.name = ""
        return m
    a, b = rng.sample(range(len(graph.node)), 2)
    graph.node[b].name = graph.node[a].name or "same"
    graph.node[a].name = graph.node[b].name
    return m


@proto_mutation(1.5)
def duplicate_value_name(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A node output renamed to an existing value's name (two definitions of one value)."""
    m = copy_model(model)
    graph = pick_graph(m, rng)
    names = known_names(graph)
    cands = [n for n in graph.node if n.output]
    if not cands or len(names) < 2:
        return None
    node = rng.choice(cands)
    node.output[0] = rng.choice([n for n in names if n != node.output[0]] or names)
    return m


@proto_mutation(2.0)
def rename_value(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: a value renamed consistently everywhere, to an unusual name (unicode, slashes,
    300 characters, a graph input's name...)."""
    m = copy_model(model)
    names = known_names(m.graph)
    if not names:
        return None
    old = rng.choice(names)
    new = rng.choice([w for w in WEIRD_NAMES if w]) + rng.choice(["", "_r"])
    if new in set(known_names(m.graph)):
        new += "_fuzz"
    rename_everywhere(m.graph, old, new)
    return m


@proto_mutation(1.0)
def insert_identity(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: an Identity (or Cast to the same type, or Dropout) inserted on an edge."""
    m = copy_model(model)
    graph = m.graph
    types = inferred_types(m)
    cands = [(k, n, i) for k, n in enumerate(graph.node) for i, x in enumerate(n.input) if x]
    if not cands:
        return None
    k, node, i = rng.choice(cands)
    src = node.input[i]
    new = fresh_name(graph, f"{src}_id")
    op = rng.choice(["Identity", "Cast", "Dropout"])
    elem = types.get(src, onnx.TypeProto()).tensor_type.elem_type
    if op == "Cast" and not elem:
        op = "Identity"
    extra = {"to": elem} if op == "Cast" else {}
    graph.node.insert(k, helper.make_node(op, [src], [new], **extra))
    node.input[i] = new
    return m


@proto_mutation(1.0)
def insert_noop_arith(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: x + 0 or x * 1 inserted on a float edge (a no-op to remove, or to not mind)."""
    m = copy_model(model)
    graph = m.graph
    types = inferred_types(m)
    cands = [(k, n, i) for k, n in enumerate(graph.node) for i, x in enumerate(n.input)
             if x and types.get(x) is not None and types[x].tensor_type.elem_type == 1]
    if not cands:
        return None
    k, node, i = rng.choice(cands)
    src = node.input[i]
    op, value = rng.choice([("Add", 0.0), ("Mul", 1.0), ("Sub", 0.0), ("Div", 1.0)])
    const = fresh_name(graph, "fuzz_c")
    new = fresh_name(graph, f"{src}_{op.lower()}")
    graph.initializer.append(onnx.numpy_helper.from_array(np.array(value, np.float32), const))
    graph.node.insert(k, helper.make_node(op, [src, const], [new]))
    node.input[i] = new
    return m


@proto_mutation(0.8)
def wrap_in_if(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: one node moved into both branches of an If on a constant true condition (the
    branches capture the node's inputs from the outer graph)."""
    m = copy_model(model)
    graph = m.graph
    if opset_of(m) is None or opset_of(m) < 11:
        return None
    cands = [n for n in graph.node if len(n.output) == 1 and n.output[0]
             and not any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS)
                         for a in n.attribute)]
    if not cands:
        return None
    node = rng.choice(cands)
    out = node.output[0]
    branches = []
    for tag in ("then", "else"):
        inner = NodeProto()
        inner.CopyFrom(node)
        inner.output[0] = f"{out}_{tag}"
        inner.name = f"{node.name}_{tag}" if node.name else ""
        branches.append(helper.make_graph([inner], f"fuzz_{tag}", [],
                                          [helper.make_empty_tensor_value_info(f"{out}_{tag}")]))
    cond = fresh_name(graph, "fuzz_cond")
    graph.initializer.append(onnx.numpy_helper.from_array(np.array(True), cond))
    wrapped = helper.make_node("If", [cond], [out], then_branch=branches[0],
                               else_branch=branches[1], name=f"fuzz_if_{out}")
    graph.node[list(graph.node).index(node)].CopyFrom(wrapped)
    return m


@proto_mutation(0.6)
def local_function(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: one node replaced by a call of a model-local function that contains it."""
    m = copy_model(model)
    graph = m.graph
    if m.ir_version < 8 or opset_of(m) is None:
        return None
    cands = [n for n in graph.node if n.domain in ("", "ai.onnx") and all(n.input)
             and all(n.output) and not any(a.type in (AttributeProto.GRAPH,
                                                      AttributeProto.GRAPHS)
                                           for a in n.attribute)]
    if not cands:
        return None
    node = rng.choice(cands)
    ins = [f"i{k}" for k in range(len(node.input))]
    outs = [f"o{k}" for k in range(len(node.output))]
    body = NodeProto()
    body.CopyFrom(node)
    del body.input[:], body.output[:]
    body.input.extend(ins)
    body.output.extend(outs)
    fname = fresh_name(graph, "FuzzFn")
    fn = helper.make_function("fuzz.local", fname, ins, outs, [body],
                              [helper.make_opsetid("", opset_of(m))])
    m.functions.append(fn)
    if opset_of(m, "fuzz.local") is None:
        m.opset_import.append(helper.make_opsetid("fuzz.local", 1))
    call = helper.make_node(fname, list(node.input), list(node.output), domain="fuzz.local",
                            name=node.name)
    graph.node[list(graph.node).index(node)].CopyFrom(call)
    return m


# ----------------------------------------------------------------------------- graph interface


@proto_mutation(2.5)
def intermediate_output(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: an intermediate value made a graph output too (fusion must keep it)."""
    m = copy_model(model)
    outs = {o.name for o in m.graph.output}
    cands = [n for n in produced(m.graph) if n not in outs]
    if not cands:
        return None
    name = rng.choice(cands)
    types = inferred_types(m)
    vi = onnx.ValueInfoProto(name=name)
    if name in types and rng.random() < 0.8:
        vi.type.CopyFrom(types[name])
    elif rng.random() < 0.5:
        vi = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
    m.graph.output.append(vi)
    return m


@proto_mutation(1.5)
def rounding_tail(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: ``q = (k·c + c) / c`` with ``k = Floor(x·64)`` (a whole number, so ``q`` is
    exactly ``k + 1`` in IEEE arithmetic, and ``q · (1/c)`` is not), then Floor, Round, a cast
    to int32, ArgMax or an equality test on ``q``, as a new output. ``x`` is a float value
    computed from the model's inputs and weights alone, so nothing fused changes its bits: the
    new output must come out bit for bit the same (a normal form that is not exact, applied
    where nothing is fused, turns the last bit into another integer)."""
    m = copy_model(model)
    g = m.graph
    types = inferred_types(m)
    sources = {i.name for i in g.input} | {t.name for t in g.initializer}
    sources |= {o for n in g.node if n.op_type == "Constant" for o in n.output}
    early = [o for n in g.node if n.input and all(i in sources for i in n.input if i)
             for o in n.output if o]
    floats = [v for v in [*early, *(i.name for i in g.input)]
              if v in types and types[v].tensor_type.elem_type == TensorProto.FLOAT]
    if not floats:
        return None
    x = rng.choice(floats)
    names = {key: fresh_name(g, f"fuzz_{key}") for key in ("c", "s", "k", "kc", "y", "q")}
    g.initializer.extend([
        onnx.numpy_helper.from_array(np.array(rng.choice([41.0, 6.0, 3.0, 7.0]), np.float32),
                                     names["c"]),
        onnx.numpy_helper.from_array(np.array(64.0, np.float32), names["s"])])
    g.node.extend([
        helper.make_node("Mul", [x, names["s"]], [names["k"] + "_scaled"]),
        helper.make_node("Floor", [names["k"] + "_scaled"], [names["k"]]),
        helper.make_node("Mul", [names["k"], names["c"]], [names["kc"]]),
        helper.make_node("Add", [names["kc"], names["c"]], [names["y"]]),
        helper.make_node("Div", [names["y"], names["c"]], [names["q"]])])
    kind = rng.choice(["Floor", "Round", "CastInt", "ArgMax", "Equal"])
    q, out = names["q"], fresh_name(g, f"fuzz_{kind.lower()}")
    if kind == "CastInt":
        g.node.append(helper.make_node("Cast", [q], [out], to=TensorProto.INT32))
    elif kind == "ArgMax":
        g.node.append(helper.make_node("ArgMax", [q], [out], axis=-1, keepdims=0))
    elif kind == "Equal":
        floor = fresh_name(g, "fuzz_floor")
        g.node.extend([helper.make_node("Floor", [q], [floor]),
                       helper.make_node("Equal", [q, floor], [out])])
    else:
        g.node.append(helper.make_node(kind, [q], [out]))
    g.output.append(onnx.ValueInfoProto(name=out))
    return m


@proto_mutation(1.0)
def output_change(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Graph outputs: one removed, duplicated, renamed to nothing, or a graph input / an
    initializer listed as an output."""
    m = copy_model(model)
    g = m.graph
    op = rng.randrange(5)
    if op == 0 and g.output:
        del g.output[rng.randrange(len(g.output))]
    elif op == 1 and g.output:
        g.output.append(rng.choice(g.output))
    elif op == 2 and g.output:
        rng.choice(g.output).name = rng.choice(["", "nowhere"])
    elif op == 3 and g.input:
        g.output.append(rng.choice(g.input))
    elif op == 4 and g.initializer:
        t = rng.choice(g.initializer)
        g.output.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    else:
        return None
    return m


@proto_mutation(1.0)
def input_change(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Graph inputs: one removed (still used), duplicated, an unused extra one added, or
    one that is also produced by a node."""
    m = copy_model(model)
    g = m.graph
    op = rng.randrange(4)
    if op == 0 and g.input:
        del g.input[rng.randrange(len(g.input))]
    elif op == 1 and g.input:
        g.input.append(rng.choice(g.input))
    elif op == 2:
        g.input.append(helper.make_tensor_value_info(fresh_name(g, "unused"), TensorProto.FLOAT,
                                                     ["fuzz_dim", 3]))
    elif op == 3 and produced(g):
        g.input.append(helper.make_tensor_value_info(rng.choice(produced(g)), TensorProto.FLOAT,
                                                     None))
    else:
        return None
    return m


@proto_mutation(2.0)
def input_shape(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A graph input's shape changed: static <-> symbolic, a dim added or removed, 0 or a
    negative size, a weird dim_param, or the shape/type cleared."""
    m = copy_model(model)
    cands = [i for i in m.graph.input if i.type.HasField("tensor_type")]
    if not cands:
        return None
    vi = rng.choice(cands)
    tt = vi.type.tensor_type
    dims = tt.shape.dim
    op = rng.randrange(8)
    if op == 0 and len(dims):
        d = dims[rng.randrange(len(dims))]
        if d.HasField("dim_param"):
            d.dim_value = rng.choice([1, 2, 3, 7])
        else:
            d.dim_param = rng.choice(["batch", "seq", "N", "fuzz"])
    elif op == 1 and len(dims):
        del dims[rng.randrange(len(dims))]
    elif op == 2:
        dims.add().dim_value = rng.choice([1, 2])
    elif op == 3 and len(dims):
        dims[rng.randrange(len(dims))].dim_value = rng.choice([0, -1, -7, 2**40])
    elif op == 4 and len(dims):
        dims[rng.randrange(len(dims))].dim_param = rng.choice(["", "名前", "a b", "-1", "1",
                                                               "batch+1", "seq*2", "?"])
    elif op == 5:
        tt.ClearField("shape")
    elif op == 6 and len(dims):
        dims[rng.randrange(len(dims))].Clear()  # unknown dim: neither value nor param
    else:
        vi.type.Clear() if rng.random() < 0.5 else tt.shape.Clear()
    return m


@proto_mutation(1.5)
def input_dtype(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A graph input's element type changed (int64 ids as int32 or float, float as float16...)."""
    m = copy_model(model)
    cands = [i for i in m.graph.input if i.type.HasField("tensor_type")]
    if not cands:
        return None
    vi = rng.choice(cands)
    vi.type.tensor_type.elem_type = rng.choice(
        [c for c in (1, 6, 7, 9, 10, 11, 16, 2, 8, 0, 99) if c != vi.type.tensor_type.elem_type])
    return m


@proto_mutation(1.5)
def value_info_corrupt(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """value_info made wrong: a bogus shape or dtype for an intermediate, an entry for a name
    that does not exist, a duplicate entry, or all of it removed."""
    m = copy_model(model)
    g = pick_graph(m, rng)
    op = rng.randrange(4)
    names = produced(g)
    if op == 0 and names:
        name = rng.choice(names)
        dtype = rng.choice([1, 7, 10, 9])
        shape = rng.choice([[1], [2, 3], [], ["s", 5, 7], [0], None])
        g.value_info.append(helper.make_tensor_value_info(name, dtype, shape))
    elif op == 1:
        g.value_info.append(helper.make_tensor_value_info("fuzz_ghost", 1, [3]))
    elif op == 2 and g.value_info:
        g.value_info.append(rng.choice(g.value_info))
    elif op == 3 and g.value_info:
        del g.value_info[:]
    elif names:
        g.value_info.append(helper.make_tensor_value_info(rng.choice(names), 1, ["x"] * 9))
    else:
        return None
    return m


@proto_mutation(1.0)
def infer_value_info(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: value_info filled in by ONNX shape inference (extra, consistent type facts)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False,
                                                     data_prop=rng.random() < 0.5)
    except Exception:  # noqa: BLE001 - a broken model: does not apply
        return None
    return inferred if len(inferred.graph.value_info) != len(model.graph.value_info) else None


# ----------------------------------------------------------------------------- versions


@proto_mutation(1.5)
def opset_change(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """The ONNX opset lowered or raised (ops then read with another version's schema)."""
    m = copy_model(model)
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx"):
            delta = rng.choice([-5, -4, -3, -2, -1, 1, 2, 3, 5])
            imp.version = rng.choice([imp.version + delta, rng.randint(1, 30), 0, -1, 10**6])
            return m
    return None


@proto_mutation(0.7)
def opset_drop(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """The ONNX-domain opset import removed (or every import)."""
    m = copy_model(model)
    keep = [] if rng.random() < 0.2 else [i for i in m.opset_import
                                           if i.domain not in ("", "ai.onnx")]
    if len(keep) == len(m.opset_import):
        return None
    del m.opset_import[:]
    m.opset_import.extend(keep)
    return m


@proto_mutation(0.8)
def opset_extra(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Imports added: ai.onnx.ml (valid), com.microsoft (valid), a duplicate ONNX import with
    another version, or the ONNX domain spelled "ai.onnx" (valid)."""
    m = copy_model(model)
    op = rng.randrange(4)
    if op == 0:
        m.opset_import.append(helper.make_opsetid("ai.onnx.ml", rng.choice([1, 2, 3, 4, 5])))
    elif op == 1:
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    elif op == 2:
        v = opset_of(m) or 17
        m.opset_import.append(helper.make_opsetid("", v - 1))
    else:
        for imp in m.opset_import:
            if imp.domain == "":
                imp.domain = "ai.onnx"
                return m
        return None
    return m


@proto_mutation(0.8)
def ir_version(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """The IR version changed (0, too old for the opset, newer than supported)."""
    m = copy_model(model)
    m.ir_version = rng.choice([0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 13, 14, 15, 99, -1])
    return m


@proto_mutation(0.5)
def metadata(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """Valid: unusual metadata (long doc strings, metadata_props, producer fields, unicode)."""
    m = copy_model(model)
    m.doc_string = rng.choice(["", "x" * 100_000, "名前\u2028\u0000"])
    m.producer_name = rng.choice(["", "fuzz", "pytorch"])
    entry = m.metadata_props.add()
    entry.key, entry.value = rng.choice([("", ""), ("k", "v"), ("名", "\u0000")])
    if m.graph.node:
        rng.choice(m.graph.node).doc_string = "doc " * 50
    m.graph.name = rng.choice(["", "g", "名前"])
    return m


# ----------------------------------------------------------------------------- subgraphs


@proto_mutation(2.0)
def subgraph_mutation(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """A node-level mutation applied inside an If/Loop/Scan body, or the body's interface
    changed (an input or output removed or added, a branch emptied)."""
    m = copy_model(model)
    subs = list(all_graphs(m.graph))[1:]
    if not subs:
        return None
    sub = rng.choice(subs)
    op = rng.randrange(6)
    if op == 0 and sub.input:
        del sub.input[rng.randrange(len(sub.input))]
    elif op == 1 and sub.output:
        del sub.output[rng.randrange(len(sub.output))]
    elif op == 2:
        sub.output.append(rng.choice(list(sub.output) or list(m.graph.input)))
    elif op == 3:
        del sub.node[:]
    elif op == 4 and sub.output:
        # a branch output renamed to an outer value (a capture as an output: valid)
        outer = known_names(m.graph)
        if not outer:
            return None
        sub.output[0].name = rng.choice(outer)
    else:
        inner = ModelProto()
        inner.CopyFrom(m)
        inner.graph.CopyFrom(sub)
        name = rng.choice(["attr_int", "swap_inputs", "empty_input", "delete_node",
                           "rewire_input", "bypass_node", "shuffle_nodes", "attr_ints"])
        changed = PROTO_MUTATIONS[name](inner, rng)
        if changed is None:
            return None
        sub.CopyFrom(changed.graph)
    return m


@proto_mutation(0.5)
def subgraph_attr_swap(model: ModelProto, rng: random.Random) -> ModelProto | None:
    """then_branch and else_branch swapped, or a body attribute removed or made a GRAPHS list."""
    m = copy_model(model)
    cands = [n for g in all_graphs(m.graph) for n in g.node
             if any(a.type == AttributeProto.GRAPH for a in n.attribute)]
    if not cands:
        return None
    node = rng.choice(cands)
    graph_attrs = [a for a in node.attribute if a.type == AttributeProto.GRAPH]
    if len(graph_attrs) == 2 and rng.random() < 0.4:
        graph_attrs[0].name, graph_attrs[1].name = graph_attrs[1].name, graph_attrs[0].name
    elif rng.random() < 0.5:
        node.attribute.remove(rng.choice(graph_attrs))
    else:
        attr = rng.choice(graph_attrs)
        attr.graphs.append(attr.g)
        attr.ClearField("g")
        attr.type = AttributeProto.GRAPHS
    return m


# ----------------------------------------------------------------------------- bytes


@byte_mutation(1.5)
def byte_flip(data: bytes, rng: random.Random) -> bytes | None:
    """1-8 random bytes XOR-ed with a random mask."""
    if not data:
        return None
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(buf))
        buf[i] ^= rng.randint(1, 255)
    return bytes(buf)


@byte_mutation(1.0)
def byte_set(data: bytes, rng: random.Random) -> bytes | None:
    """A few bytes set to 0x00, 0x7f, 0x80 or 0xff (varint and length fields mangled)."""
    if not data:
        return None
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        buf[rng.randrange(len(buf))] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
    return bytes(buf)


@byte_mutation(1.0)
def truncate(data: bytes, rng: random.Random) -> bytes | None:
    """The file cut short (an interrupted download), possibly to nothing."""
    if not data:
        return None
    return data[:rng.choice([0, 1, 8, rng.randrange(len(data)), len(data) - 1])]


@byte_mutation(0.5)
def splice(data: bytes, rng: random.Random) -> bytes | None:
    """A chunk of the file duplicated, deleted or replaced by random bytes."""
    if len(data) < 16:
        return None
    a = rng.randrange(len(data) - 8)
    b = min(len(data), a + rng.randint(1, 64))
    op = rng.randrange(3)
    if op == 0:
        return data[:b] + data[a:b] + data[b:]
    if op == 1:
        return data[:a] + data[b:]
    return data[:a] + bytes(rng.randrange(256) for _ in range(b - a)) + data[b:]


@byte_mutation(0.5)
def append_junk(data: bytes, rng: random.Random) -> bytes | None:
    """Bytes appended: an unknown protobuf field (valid), or garbage."""
    if rng.random() < 0.5:
        # field 99, varint wire type: an unknown field protobuf must skip
        return data + bytes([0x98, 0x06, 0x01])
    return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))


@byte_mutation(1.5)
def corrupt_string(data: bytes, rng: random.Random) -> bytes | None:
    """One byte of a string field (an op type, a value name, an attribute string) replaced by
    a byte that makes it invalid UTF-8, keeping its length."""
    words = [b"MatMul", b"Add", b"Softmax", b"Reshape", b"Transpose", b"input_ids", b"logits",
             b"attention_mask", b"Gather", b"Constant", b"mode", b"axis", b"perm", b"pixel_values",
             b"If", b"Loop", b"Scan", b"Conv", b"x", b"y"]
    hits = [w for w in words if w in data]
    if not hits:
        return None
    word = rng.choice(hits)
    starts, pos = [], data.find(word)
    while pos != -1 and len(starts) < 200:
        starts.append(pos)
        pos = data.find(word, pos + 1)
    pos = rng.choice(starts) + rng.randrange(len(word))
    return data[:pos] + bytes([rng.choice([0xFF, 0xC3, 0x80, 0xED, 0xFE])]) + data[pos + 1:]


@byte_mutation(0.3)
def float_bytes(data: bytes, rng: random.Random) -> bytes | None:
    """A 4-byte window overwritten with a special float32 (NaN, inf, huge) — lands in weights."""
    if len(data) < 8:
        return None
    value = struct.pack("<f", rng.choice([math.nan, math.inf, -math.inf, 3e38, 1e-40]))
    i = rng.randrange(len(data) - 4)
    return data[:i] + value + data[i + 4:]


# ----------------------------------------------------------------------------- driving


@dataclass(frozen=True)
class Step:
    """One applied mutation and the seed of its own RNG (so it can be replayed alone)."""

    name: str
    seed: int


def _weighted(names: list[str], rng: random.Random) -> str:
    return rng.choices(names, weights=[WEIGHTS[n] for n in names])[0]


def mutate(model: ModelProto, rng: random.Random, count: int | None = None,
           byte_chance: float = 0.15) -> tuple[bytes, list[Step]]:
    """Apply 1-3 proto mutations (and sometimes one byte mutation last); return the bytes
    and the steps taken."""
    count = count or rng.randint(1, 3)
    names = sorted(PROTO_MUTATIONS)
    steps: list[Step] = []
    current = model
    for _ in range(count * 6):
        if len(steps) >= count:
            break
        step = Step(_weighted(names, rng), rng.getrandbits(32))
        changed = PROTO_MUTATIONS[step.name](current, random.Random(step.seed))
        if changed is not None:
            current, steps = changed, steps + [step]
    data = current.SerializeToString()
    if rng.random() < byte_chance or not steps:
        for _ in range(6):
            step = Step(_weighted(sorted(BYTE_MUTATIONS), rng), rng.getrandbits(32))
            changed_bytes = BYTE_MUTATIONS[step.name](data, random.Random(step.seed))
            if changed_bytes is not None:
                return changed_bytes, steps + [step]
    return data, steps


def replay(model: ModelProto, steps: list[Step]) -> bytes | None:
    """Rebuild a mutant from its steps (``None`` if a step no longer applies)."""
    current = model
    data: bytes | None = None
    for step in steps:
        if step.name in PROTO_MUTATIONS:
            if data is not None:
                return None
            changed = PROTO_MUTATIONS[step.name](current, random.Random(step.seed))
            if changed is None:
                return None
            current = changed
        else:
            data = current.SerializeToString() if data is None else data
            data = BYTE_MUTATIONS[step.name](data, random.Random(step.seed))
            if data is None:
                return None
    return current.SerializeToString() if data is None else data
