"""ONNX ModelProto → semantic IR.

Walks the graph once, resolving every input name through a chain of scopes
(a subgraph may read values of the graphs around it), so import is linear in
the model's size. Constant nodes become constants; initializers keep a lazy
reference to their bytes (embedded or external), so no weight is copied.
Structural errors — a name read before anything produces it, a cycle, a name
produced twice — are reported as one-line :class:`ModelError`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import re

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto

from onnxopt.errors import ModelError
from onnxopt.importer.load import (
    check_versions,
    external_problem,
    fix_undecodable_text,
    has_undecodable_text,
    map_model_file,
    raw_lengths,
    resolve_external,
    tensor_bytes,
    tensor_problem,
)
from onnxopt.importer.names_in_use import names_in_use
from onnxopt.importer.toposort import reads_of, topological_order
from onnxopt.importer.varying_ranks import ranks_that_vary
from onnxopt.importer.wire import STRIPPED_MIN_BYTES
from onnxopt.ir import schema_facts
from onnxopt.ir import symdim as sd
from onnxopt.ir.dtypes import dtype_name, numpy_dtype
from onnxopt.ir.graph import Graph, NameScope
from onnxopt.ir.model import Model
from onnxopt.ir.node import STANDARD_DOMAINS, Attr, Node
from onnxopt.ir.opset_spelling import make_opaque, upgrade
from onnxopt.ir.semantics import annotate
from onnxopt.ir.tensor import LazyTensor, stored_size
from onnxopt.ir.value import Shape, Value
from onnxopt.isolation import Child, Done, NativeCrash, started


def import_model(source: str | ModelProto, *, infer_shapes: bool = True) -> Model:
    """Read a path or ModelProto into the IR (external data referenced, not loaded)."""
    mapped = None  # the file, where read from one
    if isinstance(source, ModelProto):
        proto, label, base_dir = source, "<model>", None
        check_versions(proto, label)
        if has_undecodable_text(proto):
            proto = ModelProto()
            proto.CopyFrom(source)  # the caller's proto stays as it was
            fix_undecodable_text(proto)
        text_checked = True
    else:
        path = os.fspath(source)
        mapped = map_model_file(path)
        proto = mapped.proto
        label, base_dir = path, os.path.dirname(os.path.abspath(path))
        text_checked = False  # the proto is onnxopt's own: fixed in place, if need be
    importer = _Importer(label, base_dir)
    if mapped is not None:
        importer.encodings, importer.left_out = mapped.encodings, mapped.raw
    with _gc_paused():
        return importer.run(proto, infer_shapes, text_checked)


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while the IR is built.

    Import allocates a few objects per node that all survive (Nodes and Values
    refer to each other), and each collection pass walks everything allocated
    so far: with the collector on, import cost grew faster than the graph
    (17 µs/node at 3,000 nodes, 27 µs/node at 48,000); with it paused it stays
    flat. Nothing collectable is made during import, so nothing is lost.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Scope:
    __slots__ = ("parent", "values")

    def __init__(self, parent: _Scope | None = None) -> None:
        self.values: dict[str, Value] = {}
        self.parent = parent

    def lookup(self, name: str) -> Value | None:
        scope: _Scope | None = self
        while scope is not None:
            v = scope.values.get(name)
            if v is not None:
                return v
            scope = scope.parent
        return None


class _Importer:
    def __init__(self, label: str, base_dir: str | None) -> None:
        self.label = label
        self.base_dir = base_dir
        self.had_external = False
        # Types by graph (a path of (node index, attribute, k) from the main graph: sibling
        # subgraphs may reuse a name with another type) and name: (dtype, shape) of tensors,
        # and TypeProtos of what is not a plain tensor (sequence, optional, map, sparse).
        self.shapes: dict[tuple, dict[str, tuple[str | None, Shape]]] = {}
        self.other_types: dict[tuple, dict[str, onnx.TypeProto]] = {}
        self._path: tuple = ()
        self.opset = 0
        self.raw_lengths: dict[str, int] = {}  # the main graph's initializers' (raw_lengths)
        # The main graph's initializers' bytes in the file read, by position, and the raw data
        # left out of their parsed messages (importer/wire.py, load.map_model_file).
        self.encodings: list[memoryview] | None = None
        self.left_out: dict[int, memoryview] = {}
        self._left_out_of: dict[int, memoryview] = {}  # the same, by id of the message

    def run(self, proto: ModelProto, infer_shapes: bool, text_checked: bool = True) -> Model:
        self.opset = onnx_opset(proto)
        hint = started(_inferred_graph, proto) if infer_shapes else None
        try:
            # While onnx's inference runs in its child, what needs no inferred type is done.
            if not text_checked and has_undecodable_text(proto):
                fix_undecodable_text(proto)
                self.encodings = None  # the messages no longer are what the file holds
                if hint is not None:  # it was handed the text protobuf cannot write: again
                    hint.cancel()
                    hint = started(_inferred_graph, proto)
            declared = set(_declared_names(proto.graph))
            ranks_declared = _ranks_declared(proto.graph)
            self.raw_lengths = raw_lengths(proto.graph, self.left_out)
            source_tensor_bytes = tensor_bytes(proto, raw_lengths=self.raw_lengths,
                                              left_out=self.left_out)
            if hint is not None:
                waited, hint = hint, None
                self._collect_inferred_shapes(waited)
        finally:
            if hint is not None:  # something above raised: the child is not left behind
                hint.cancel()
        distrusted = ranks_that_vary(proto.graph, self.shapes.get((), {}))
        self._collect_value_info(proto.graph, (), ranks_declared, distrusted)
        names = NameScope()
        names.taken.update(names_in_use(proto))
        graph = self._graph(proto.graph, _Scope(), names, parent=None, path=())
        return Model(
            graph=graph,
            opset_imports={imp.domain: imp.version for imp in proto.opset_import},
            ir_version=proto.ir_version,
            producer_name=proto.producer_name,
            producer_version=proto.producer_version,
            domain=proto.domain,
            model_version=proto.model_version,
            doc_string=proto.doc_string,
            metadata_props={p.key: p.value for p in proto.metadata_props},
            functions=list(proto.functions),
            base_dir=self.base_dir,
            had_external_data=self.had_external,
            declared_value_info=declared,
            declared_outputs={o.name: type_of(o.type)[1] for o in proto.graph.output},
            source_tensor_bytes=source_tensor_bytes,
        )

    # --- shapes ---------------------------------------------------------------------------------
    def _collect_inferred_shapes(self, hint: Child | Done) -> None:
        """onnx's shape inference, computed in a forked child (:func:`_inferred_graph`): it is
        a hint, and on some malformed models (a negative GatherND ``batch_dims``) its C++ code
        segfaults."""
        try:
            inferred, facts = hint.result()
        except NativeCrash:
            return
        if facts is not None:
            schema_facts.take(facts)
        if inferred is not None:
            graph = GraphProto()
            graph.ParseFromString(inferred)
            self._collect_value_info(graph, ())

    def _collect_value_info(self, g: GraphProto, path: tuple, trust_shapes: bool = True,
                            distrusted: set[str] | frozenset = frozenset()) -> None:
        """Types by name: inferred ones first, then the file's. A main graph input of unknown
        rank admits inputs of any rank, so then the declared shapes of intermediate values
        (written for the exporter's own inputs) are not taken at their word; nor are those of
        ``distrusted``, values whose rank varies from run to run (importer/varying_ranks.py)."""
        shapes = self.shapes.setdefault(path, {})
        others = self.other_types.setdefault(path, {})
        intermediate = {vi.name for vi in g.value_info}
        for vi in list(g.value_info) + list(g.output) + list(g.input):
            if vi.type.WhichOneof("value") not in (None, "tensor_type"):
                others.setdefault(vi.name, vi.type)
            dtype, shape = type_of(vi.type)
            if (not trust_shapes and vi.name in intermediate) or vi.name in distrusted:
                shape = None
            old = shapes.get(vi.name)
            if old is None or (old[1] is None and shape is not None) or old[0] is None:
                shapes[vi.name] = (dtype, shape)
            elif shape is not None and len(shape) == len(old[1]):
                # What inference left unknown (or named with a symbol of its own invention),
                # a declared type of the same rank may fill.
                merged = tuple(n if _invented(o) and n is not None else o
                               for o, n in zip(old[1], shape))
                shapes[vi.name] = (old[0], merged)
        for i, node in enumerate(g.node):
            for a in node.attribute:
                for k, sub in enumerate([a.g] if a.type == AttributeProto.GRAPH else a.graphs):
                    self._collect_value_info(sub, (*path, (i, a.name, k)), trust_shapes)

    def _type(self, name: str) -> tuple[str | None, Shape] | None:
        return self.shapes.get(self._path, {}).get(name)

    def _typed_value(self, name: str) -> Value:
        dtype, shape = self._type(name) or (None, None)
        v = Value(name, dtype, shape)
        v.type_proto = self.other_types.get(self._path, {}).get(name)
        return v

    # --- graphs ---------------------------------------------------------------------------------
    def _graph(self, g: GraphProto, scope: _Scope, names: NameScope, parent: Node | None,
               path: tuple) -> Graph:
        outer_path, self._path = self._path, path
        try:
            return self._graph_at(g, scope, names, parent)
        finally:
            self._path = outer_path

    def _graph_at(self, g: GraphProto, scope: _Scope, names: NameScope,
                  parent: Node | None) -> Graph:
        graph = Graph(g.name or "main", parent=parent, names=names)
        graph.doc_string = g.doc_string
        groups: dict[str, list[TensorProto]] = {}
        # The main graph's initializers' encodings in the file, by the message (held in
        # ``groups``, so an id stays its own while this runs).
        encodings = self.encodings if parent is None else None
        encoded: dict[int, memoryview] = {}
        left_out = self.left_out if parent is None else {}
        for k, t in enumerate(g.initializer):
            groups.setdefault(t.name, []).append(t)
            if encodings is not None:
                encoded[id(t)] = encodings[k]
            if k in left_out:
                self._left_out_of[id(t)] = left_out[k]
        for vi in g.input:
            known = scope.values.get(vi.name)
            if known is not None and known in graph.inputs:
                graph.inputs.append(known)  # listed twice: kept so (the interface is the file's)
                continue
            self._claim(scope, names, vi.name, "graph input")
            dtype, shape = type_of(vi.type)
            v = graph.add_input(vi.name, dtype, shape)
            v.type_proto = _other_type(vi.type)
            scope.values[vi.name] = v
            given = groups.pop(vi.name, [])
            if len(given) == 1:
                graph.input_defaults[vi.name] = self._tensor(given[0], encoded.get(id(given[0])),
                                                             stripped=True)
            elif given:  # written back as they were: which one ONNX Runtime takes is its own
                graph.opaque_initializers[vi.name] = (None, self._kept(given))
            v.doc_string = vi.doc_string
        for p in g.node:  # ONNX Runtime takes the latest definition: a Constant node's
            if p.op_type == "Constant" and len(p.output) == 1:  # over an initializer's
                groups.pop(p.output[0], None)
        read: set[str] | None = None
        for name, protos in groups.items():
            t = protos[-1]
            if t.data_location == TensorProto.EXTERNAL and external_problem(t, self.base_dir):
                read = read if read is not None else reads_of(g)
                if name not in read:
                    continue  # external data nothing reads: ORT never loads it, neither do we
            self._claim(scope, names, name, "initializer")
            known = self.raw_lengths.get(name) if parent is None else None
            if len(protos) == 1 and tensor_problem(t, known) is None:
                tensor = self._tensor(t, encoded.get(id(t)), stripped=True)
                scope.values[name] = graph.add_constant(tensor, name, exact_name=True)
            else:  # unreadable, or given twice (ORT's pick between them is its own): kept as is
                for kept in protos:
                    self._restore(kept)
                dims = tuple(t.dims) if tensor_problem(t) is None else None  # not to be trusted
                scope.values[name] = self._opaque(name, protos, graph, t.data_type, dims)
        self._left_out_of.clear()  # each one taken (ids are only an object's while it lives)
        for sparse in g.sparse_initializer:
            name = sparse.values.name
            if name in scope.values:  # also an input or a dense initializer: kept as it was
                value, protos = graph.opaque_initializers.get(name, (None, []))
                graph.opaque_initializers[name] = (value, [*protos, sparse])
                continue
            self._claim(scope, names, name, "sparse initializer")
            scope.values[name] = self._opaque(name, [sparse], graph, sparse.values.data_type,
                                              tuple(sparse.dims))
        for index, node_proto in topological_order(g, scope.lookup, self.label):
            self._node(node_proto, graph, scope, index)
        outputs = []
        for vi in g.output:
            v = scope.lookup(vi.name)
            if v is None:
                raise ModelError(f"{self.label}: graph output '{vi.name}' is produced by no node")
            dtype, shape = type_of(vi.type)
            if dtype is not None and v.dtype is None:
                v.dtype = dtype
            if shape is not None:
                v.shape = shape
            if v.type_proto is None:
                v.type_proto = _other_type(vi.type)
            outputs.append(v)
        graph.set_outputs(outputs)  # (a value may be listed twice: ORT returns it twice)
        if parent is not None:
            graph.declared_output_types = [vi.type for vi in g.output]
        return graph

    def _claim(self, scope: _Scope, names: NameScope, name: str, what: str) -> None:
        """Names are unique within one graph; sibling subgraphs (two Scan bodies) may reuse
        them, and a subgraph's own name hides an enclosing one, as in ONNX's scoping."""
        if name in scope.values:
            raise ModelError(f"{self.label}: duplicate name '{name}' ({what} defined twice)")
        names.claim(name)

    def _opaque(self, name: str, protos: list, graph: Graph, data_type: int,
                dims: Shape) -> Value:
        """An initializer no pass reads (sparse, of data onnxopt cannot read, or given more
        than once): a Value nodes can read, its protos written back as they were."""
        v = Value(name, dtype_name(data_type), dims)
        v.graph = graph
        graph.opaque_initializers[name] = (v, self._kept(protos))
        return v

    def _kept(self, protos: list) -> list:
        """The protos of a kept-as-is initializer, as the output will hold them. A name given
        twice is ONNX Runtime's to resolve, and it resolves it by storage (measured, ORT
        1.31): the first of those stored inline, else the last one. Written inline elsewhere,
        external copies would change that pick, so then only the pick is written."""
        external = [t for t in protos
                    if isinstance(t, TensorProto) and t.data_location == TensorProto.EXTERNAL]
        if len(protos) < 2 or not external:
            return [self._inlined(t) for t in protos]
        inline = [t for t in protos if t not in external]
        pick = self._inlined(inline[0] if inline else protos[-1])
        if pick.data_location == TensorProto.EXTERNAL:
            return protos  # its bytes cannot be read: written back as they were
        return [pick]

    def _inlined(self, t):
        """A kept-as-is tensor whose bytes lie in an external file: a copy with them inline, so
        the output (written elsewhere) still holds them. Rare (an initializer given twice), so
        reading it whole is no burden."""
        self._restore(t)
        if not isinstance(t, TensorProto) or t.data_location != TensorProto.EXTERNAL:
            return t
        try:
            lazy = LazyTensor.from_proto(t, resolve_external(t, self.base_dir, self.label))
            data = b"".join(lazy.raw_chunks())
        except (ModelError, OSError):
            return t  # unreadable: written back as it was, for ORT to judge
        copy = TensorProto()
        copy.CopyFrom(t)
        copy.data_location = TensorProto.DEFAULT
        del copy.external_data[:]
        copy.raw_data = data
        return copy

    def _node(self, p: onnx.NodeProto, graph: Graph, scope: _Scope, index: int) -> None:
        if p.op_type == "Constant" and p.domain in STANDARD_DOMAINS and len(p.output) == 1:
            tensor = self._constant_node_tensor(p)
            given = scope.values.get(p.output[0])
            if given is not None and given in graph.inputs:
                # ONNX Runtime turns Constant nodes into initializers: one named like a graph
                # input is that input's default, as an initializer of that name would be.
                if tensor is not None:
                    graph.input_defaults[p.output[0]] = tensor
                return
            if tensor is not None:
                self._claim(scope, graph.names, p.output[0], "node output")
                v = graph.add_constant(tensor, p.output[0], exact_name=True)
                _apply_type(v, self._type(p.output[0]))
                scope.values[p.output[0]] = v
                return
        # Unnamed nodes get a name, so explanations and errors can point at them.
        node = Node(p.op_type, p.domain, p.name or graph.names.fresh(p.op_type))
        node.anonymous = not p.name
        node.doc_string = p.doc_string
        node.overload = getattr(p, "overload", "")
        node.metadata = {m.key: m.value for m in getattr(p, "metadata_props", [])}
        where = (*self._path, index)
        node.attrs = {a.name: self._attr(a, graph, scope, node, where) for a in p.attribute}
        unreadable = any(tensor_problem(a.t) for a in p.attribute if a.type == AttributeProto.TENSOR)
        inputs = []
        for name in p.input:
            if not name:
                inputs.append(None)
                continue
            v = scope.lookup(name)
            if v is None:  # toposort already proved every input resolvable
                raise ModelError(f"{self.label}: node '{p.name or p.op_type}' reads '{name}', "
                                 "which nothing produces")
            inputs.append(v)
        for i, name in enumerate(p.output):
            if not name:
                name = graph.names.fresh(f"{p.name or p.op_type}_unused{i}")
            else:
                self._claim(scope, graph.names, name, "node output")
            v = self._typed_value(name)
            v.producer, v.index = node, i
            node.outputs.append(v)
            scope.values[name] = v
        graph.append(node)
        graph.set_inputs(node, inputs)
        if node.domain in STANDARD_DOMAINS:
            if unreadable:
                make_opaque(node)  # a tensor attribute of data onnxopt cannot read
            else:
                upgrade(node, graph, self.opset)
        annotate(node)

    # --- tensors and attributes -----------------------------------------------------------------
    def _tensor(self, t: TensorProto, encoded: memoryview | None = None,
                stripped: bool = False) -> LazyTensor:
        """``encoded``: ``t``'s bytes in the input file, where known; ``stripped``: ``t`` may be
        a main-graph initializer whose raw data was left out of it (then the tensor reads it
        from the file's bytes, where it lies as NumPy would view it)."""
        if t.data_location == TensorProto.EXTERNAL:
            self.had_external = True
            return LazyTensor.from_proto(t, resolve_external(t, self.base_dir, self.label))
        raw = self._left_out_of.pop(id(t), None) if stripped else None
        tensor = LazyTensor.from_proto(t)
        if raw is not None and _viewable(tensor, raw):
            tensor.raw = raw
        elif raw is not None:  # packed (4-bit types): read through onnx's helper
            t.raw_data = bytes(raw)
        tensor.encoded = encoded
        return tensor

    def _restore(self, t) -> None:
        """Put raw data left out of ``t`` back into it (a copy): for what is written back as it
        was, or read through onnx's helper."""
        raw = self._left_out_of.pop(id(t), None)
        if raw is not None:
            t.raw_data = bytes(raw)

    def _constant_node_tensor(self, p: onnx.NodeProto) -> LazyTensor | None:
        """The value of a Constant node, read as ONNX Runtime reads it: by the attribute's
        type, not its name (a corrupt ``value`` of type INT is the integer, not the tensor
        its message still holds)."""
        if len(p.attribute) != 1:
            return None
        a = p.attribute[0]
        if a.type == AttributeProto.TENSOR:
            return self._tensor(a.t) if tensor_problem(a.t) is None else None
        return _constant_from_attr(a)

    def _attr(self, a: AttributeProto, graph: Graph, scope: _Scope, node: Node,
              where: tuple) -> Attr:
        """``where``: the path of the node's graph plus the node's index (subgraphs' types)."""
        t = a.type
        if a.ref_attr_name:
            return Attr(t, ("ref", a.ref_attr_name))
        if t == AttributeProto.FLOAT:
            return Attr(t, a.f)
        if t == AttributeProto.INT:
            return Attr(t, a.i)
        if t == AttributeProto.STRING:
            return Attr(t, a.s.decode("utf-8", errors="surrogateescape"))
        if t == AttributeProto.TENSOR:
            return Attr(t, self._tensor(a.t))
        if t == AttributeProto.GRAPH:
            return Attr(t, self._subgraph(a.g, graph, scope, node, (*where[:-1], (where[-1],
                                                                                 a.name, 0))))
        if t == AttributeProto.FLOATS:
            return Attr(t, tuple(a.floats))
        if t == AttributeProto.INTS:
            return Attr(t, tuple(a.ints))
        if t == AttributeProto.STRINGS:
            return Attr(t, tuple(s.decode("utf-8", errors="surrogateescape") for s in a.strings))
        if t == AttributeProto.GRAPHS:
            return Attr(t, tuple(self._subgraph(g, graph, scope, node,
                                                (*where[:-1], (where[-1], a.name, k)))
                                 for k, g in enumerate(a.graphs)))
        if t == AttributeProto.TENSORS:
            return Attr(t, tuple(self._tensor(x) for x in a.tensors))
        # sparse tensors and type protos: kept verbatim
        return Attr(t, ("proto", a))

    def _subgraph(self, g: GraphProto, outer: Graph, scope: _Scope, node: Node,
                  path: tuple) -> Graph:
        return self._graph(g, _Scope(scope), outer.names, parent=node, path=path)


def _declared_names(g: GraphProto):
    for vi in g.value_info:
        yield vi.name
    for node in g.node:
        for a in node.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                yield from _declared_names(sub)


def _constant_from_attr(a: AttributeProto) -> LazyTensor | None:
    """``value_float(s)``/``value_int(s)``, by type; strings and sparse values stay nodes."""
    if a.type == AttributeProto.FLOAT:
        return LazyTensor.from_array(np.array(a.f, dtype=np.float32))
    if a.type == AttributeProto.FLOATS:
        return LazyTensor.from_array(np.array(list(a.floats), dtype=np.float32))
    if a.type == AttributeProto.INT:
        return LazyTensor.from_array(np.array(a.i, dtype=np.int64))
    if a.type == AttributeProto.INTS:
        return LazyTensor.from_array(np.array(list(a.ints), dtype=np.int64))
    return None


def _viewable(tensor: LazyTensor, raw: memoryview) -> bool:
    """Whether ``raw`` is ``tensor``'s numbers one element after the other (not packed)."""
    try:
        return tensor.size * numpy_dtype(tensor.dtype).itemsize == len(raw)
    except (TypeError, ValueError, KeyError):
        return False


def _inferred_graph(proto: ModelProto) -> tuple[bytes | None, tuple | None]:
    """The graph of ``proto`` with onnx's inferred value_info — run in the forked child, which
    first drops its copy's large initializer data (inference reads only small tensors such
    as shape vectors, and the graph it sends back then carries no weights). The declared
    types of intermediate values are dropped too: inference would start from them, and a
    wrong declared rank would then come back as if inferred; they are merged in after. So
    are declared dims of negative size (:func:`_forget_negative_dims`). With it come the
    schema facts the parent would otherwise build onnx's registry for
    (:mod:`onnxopt.ir.schema_facts`): inference has built it here."""
    opset, op_types = onnx_opset(proto), _strip_for_inference(proto)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception:  # noqa: BLE001 - shape inference is a hint
        inferred = None
    try:
        facts = schema_facts.facts_for(op_types, opset)
    except Exception:  # noqa: BLE001 - the parent looks up what it needs itself
        facts = None
    return (None if inferred is None else inferred.graph.SerializeToString()), facts


def _strip_for_inference(proto: ModelProto) -> set[str]:
    """Drop what inference must not start from or need not read (see :func:`_inferred_graph`),
    in every graph; return the op types of the default domain met on the way."""
    op_types: set[str] = set()
    stack = [proto.graph]
    while stack:
        g = stack.pop()
        del g.value_info[:]
        _forget_negative_dims(g)
        for t in g.initializer:
            if t.data_location != TensorProto.EXTERNAL and stored_size(t) >= STRIPPED_MIN_BYTES:
                for field in ("raw_data", "float_data", "int32_data", "int64_data",
                              "double_data", "uint64_data", "string_data"):
                    t.ClearField(field)
        for node in g.node:
            if node.domain in STANDARD_DOMAINS:
                op_types.add(node.op_type)
                if node.op_type == "Constant":
                    _keep_constant_attributes(node)
            for a in node.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    return op_types


def _forget_negative_dims(g: GraphProto) -> None:
    """A declared dim of negative size means nothing is known (:func:`type_of`), but onnx's
    inference computes with it: a Conv over a width of -1 comes out 0 wide, and the 0 would
    come back as if inferred (and fold a Reshape target to a constant). It is cleared."""
    for vi in (*g.input, *g.output):
        if vi.type.HasField("tensor_type"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value < 0:
                    d.ClearField("dim_value")


_CONSTANT_ATTRIBUTES = frozenset({"value", "value_float", "value_floats", "value_int",
                                  "value_ints", "value_string", "value_strings", "sparse_value"})


def _keep_constant_attributes(node) -> None:
    """A Constant with attributes of other names besides its value: ONNX Runtime reads the
    value, onnx's shape inference may read another one (and infer shapes the model does not
    have). The copy handed to shape inference keeps only the Constant's own attributes."""
    if any(a.name not in _CONSTANT_ATTRIBUTES for a in node.attribute):
        kept = [a for a in node.attribute if a.name in _CONSTANT_ATTRIBUTES]
        del node.attribute[:]
        node.attribute.extend(kept)


_INVENTED_SYMBOL = re.compile(r"unk__\d+")


def _invented(dim) -> bool:
    """An unknown dimension, or one onnx's shape inference named itself (``unk__N``)."""
    return dim is None or (isinstance(dim, str) and _INVENTED_SYMBOL.fullmatch(dim) is not None)


def _ranks_declared(g: GraphProto) -> bool:
    """Whether every input the caller must feed declares its rank."""
    defaults = {t.name for t in g.initializer}
    return all(vi.type.tensor_type.HasField("shape") for vi in g.input
               if vi.name not in defaults and vi.type.HasField("tensor_type"))


def onnx_opset(proto: ModelProto) -> int:
    """The model's ONNX-domain opset (0 when it imports none, as ML-only models do). Listed
    more than once, the last entry is the one ONNX Runtime reads (and the one the exporter
    writes back), so it is the one every node is read at."""
    versions = [imp.version for imp in proto.opset_import if imp.domain in STANDARD_DOMAINS]
    return versions[-1] if versions else 0


def _other_type(tp: onnx.TypeProto) -> onnx.TypeProto | None:
    """``tp`` itself when it is not a plain tensor type (sequence, optional, map, sparse)."""
    return tp if tp.WhichOneof("value") not in (None, "tensor_type") else None


def type_of(tp: onnx.TypeProto) -> tuple[str | None, Shape]:
    """(dtype, shape) of a tensor TypeProto; symbols kept as strings, unknown dims as None."""
    if not tp.HasField("tensor_type"):
        return None, None
    tt = tp.tensor_type
    dtype = dtype_name(tt.elem_type)
    if not tt.HasField("shape"):
        return dtype, None
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:  # a negative size means nothing known
            dims.append(d.dim_value)
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param if _names_a_symbol(d.dim_param) else None)
        else:
            dims.append(None)
    return dtype, tuple(dims)


@functools.lru_cache(maxsize=4096)
def _names_a_symbol(name: str) -> bool:
    """A declared dim name read as a symbol: ``batch``, ``2*s0`` (an exporter's expression).
    A name that is only a number ("1") is a name, not that number — ONNX Runtime binds it to
    whatever size it is fed — so it is read as unknown. Cached: a model spells a few dim
    names thousands of times (7,700 reads on a 24-layer dynamo LLaMA)."""
    monomial = sd.to_monomial(name)
    return monomial is not None and bool(monomial[1])


def _apply_type(v: Value, info: tuple[str | None, Shape] | None) -> None:
    if info is None:
        return
    if v.dtype is None:
        v.dtype = info[0]

