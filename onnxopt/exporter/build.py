"""Semantic IR → ONNX ModelProto.

The exporter writes back exactly what the IR holds: the same graph inputs,
outputs, names, dtypes and symbolic shapes; constants as initializers (an
unchanged weight reuses its original TensorProto, an external one keeps its
reference until :mod:`onnxopt.exporter.save` streams its bytes); semantic
flags lowered to ONNX spelling (a MatMul with ``transpose_b`` gets its
Transpose back). Opset imports cover every domain used; the IR version is
the lowest that the opset needs and the installed ONNX Runtime accepts.
"""

from __future__ import annotations

import onnx
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, helper, numpy_helper

from onnxopt.exporter.save import EXTERNAL_MARK, inline_external, restore_left_out
from onnxopt.exporter.versions import choose_ir_version
from onnxopt.ir import symdim as sd
from onnxopt.ir.dtypes import dtype_code
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import STANDARD_DOMAINS, Attr, Node
from onnxopt.ir.opset_spelling import export_form
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Value


def export_model(model: Model) -> ModelProto:
    """Build a ModelProto with every weight inline (external ones are read)."""
    proto, external = export_model_lazy(model)
    if external:

        inline_external(proto, external)
    return proto


def export_model_lazy(model: Model) -> tuple[ModelProto, dict[str, LazyTensor]]:
    """Build a ModelProto whose external tensors are placeholders, and those tensors by name.

    :func:`onnxopt.exporter.save.save_model` streams the placeholders' bytes
    to a data file, so weights never need to be in memory all at once.
    """
    proto, external, _, _ = export_model_encoded(model)
    return proto, external


def export_model_encoded(model: Model, *, keep_left_out: bool = False
                         ) -> tuple[ModelProto, dict[str, LazyTensor], dict[int, memoryview],
                                    dict[int, memoryview]]:
    """:func:`export_model_lazy`, and the main graph's initializers (by position) that are
    the input's own messages, unchanged, each with its bytes in the input file: what
    :func:`onnxopt.exporter.serialize.model_parts` writes for them.

    With ``keep_left_out``, such a message whose raw data the importer left out of it
    (:func:`onnxopt.importer.load.map_model_file`) is written without it too (appending it
    whole would copy its weights once more): the last dict gives its raw data by position,
    and the proto holds all its numbers only once :func:`restore_left_out` puts them back.
    A model with external tensors gets them back here (what writes external data reads
    every tensor from its message)."""
    exporter = ProtoWriter(model, keep_left_out=keep_left_out)
    proto = ModelProto()
    # Written in place: a graph built apart and copied in would copy every weight once more.
    exporter.graph(model.graph, into=proto.graph)
    opsets = dict(model.opset_imports)
    for domain in exporter.domains:
        if domain not in STANDARD_DOMAINS and domain not in opsets:
            opsets[domain] = 1
    for domain, version in sorted(opsets.items()):
        proto.opset_import.add(domain=domain, version=version)
    _set(proto, "producer_name", model.producer_name)
    _set(proto, "producer_version", model.producer_version)
    _set(proto, "domain", model.domain)
    if model.model_version:
        proto.model_version = model.model_version
    _set(proto, "doc_string", model.doc_string)
    for k, v in model.metadata_props.items():
        proto.metadata_props.add(key=k, value=v)
    proto.functions.extend(model.functions)
    proto.ir_version = choose_ir_version(model.ir_version, opsets.get("", 0))
    left_out = exporter.left_out
    if exporter.external and left_out:
        restore_left_out(proto, left_out)
        left_out = {}
    return proto, exporter.external, exporter.encoded, left_out


class ProtoWriter:
    """Writes IR graphs, nodes and tensors as ONNX protos (in the model's opset spelling)."""

    def __init__(self, model: Model, keep_left_out: bool = False) -> None:
        self.model = model
        self.keep_left_out = keep_left_out
        # Main-graph initializers written without the raw data the importer left out of them:
        # position -> that raw data (see export_model_encoded).
        self.left_out: dict[int, memoryview] = {}
        self.external: dict[str, LazyTensor] = {}
        self.domains: set[str] = set()  # the domains the written nodes use
        self._read: set[str] = set()  # names the written nodes read (subgraphs included)
        # Main-graph initializers written as the input's own message: position -> its bytes
        # in the input file (see export_model_encoded).
        self.encoded: dict[int, memoryview] = {}

    def graph(self, g: Graph, into: GraphProto | None = None) -> GraphProto:
        """``g`` as a GraphProto, written into ``into`` where given."""
        gp = GraphProto() if into is None else into
        gp.name = g.name
        _set(gp, "doc_string", g.doc_string)
        for v in g.inputs:
            gp.input.append(value_info(v))
        main = g is self.model.graph
        for name, tensor in g.input_defaults.items():
            self._initializer(gp, tensor, name, main)
        known = {v.name for v in g.inputs} | set(g.constants) | {v.name for v in g.outputs}
        for node in g:
            for n in self.node(node):
                gp.node.append(n)
            for out in node.outputs:
                if out.name in known or (out.dtype is None and out.shape is None
                                         and out.type_proto is None):
                    continue
                # Declared types stay; onnxopt adds types only where ONNX Runtime cannot infer
                # them (its own domains' nodes). Shapes of our inference written for standard
                # ops would be a claim ORT's memory planner trusts: where the input's declared
                # shapes were wrong, a wrong claim breaks a model the original runs. Even true
                # claims are not neutral: naming the dims ORT's inference leaves unnamed made
                # its planner twice as fast, but TorchScript BERT ran 8% slower at batch 8 and
                # Swin 5-11% slower (buffer reuse; benchmarks/RESULTS.md, issue 12).
                if out.name in self.model.declared_value_info or (
                        node.created_by and node.onnx_op[0] not in STANDARD_DOMAINS):
                    gp.value_info.append(value_info(out))
        outputs = g.output_set()
        for v in g.constants.values():
            # A constant that nodes read in the IR but not in the file was an operand the
            # model's opset spells as an attribute (Unsqueeze axes before 13): it stays out.
            if v.num_uses and v.name not in self._read and v not in outputs:
                continue
            self._initializer(gp, v.const, v.name, main)
        for _, protos in g.opaque_initializers.values():
            for kept in protos:
                if isinstance(kept, onnx.SparseTensorProto):
                    gp.sparse_initializer.append(kept)
                else:
                    gp.initializer.append(kept)
        declared = g.declared_output_types
        if declared is not None and len(declared) != len(g.outputs):
            declared = None
        for k, v in enumerate(g.outputs):
            vi = value_info(v)
            if g is self.model.graph:
                _keep_declared_dims(vi, self.model.declared_outputs.get(v.name))
            elif declared is not None:
                vi.ClearField("type")
                if declared[k].WhichOneof("value") is not None:
                    vi.type.CopyFrom(declared[k])
            gp.output.append(vi)
        return gp

    def _initializer(self, gp: GraphProto, tensor: LazyTensor, name: str, main: bool) -> None:
        as_encoded = main and tensor.encoded is not None
        written = self.tensor(tensor, name, whole=not (as_encoded and self.keep_left_out))
        gp.initializer.append(written)
        if as_encoded and written is tensor.proto:
            position = len(gp.initializer) - 1
            self.encoded[position] = tensor.encoded
            if tensor.raw is not None:
                self.left_out[position] = tensor.raw

    def node(self, node: Node) -> list[onnx.NodeProto]:
        domain, values, attrs = export_form(node, self.model.opset)
        inputs = [v.name if v is not None else "" for v in values]
        self._read.update(inputs)
        self.domains.add(domain)
        pre: list[onnx.NodeProto] = []
        if node.op_type == "MatMul" and node.domain in STANDARD_DOMAINS:
            for flag, pos in (("transpose_a", 0), ("transpose_b", 1)):
                if node.sem.get(flag):
                    pre.append(self._swap_last_two(node, pos, inputs))
        np_ = onnx.NodeProto()
        np_.op_type = node.onnx_op[1]
        _set(np_, "domain", domain)
        _set(np_, "name", "" if node.anonymous else node.name)
        _set(np_, "doc_string", node.doc_string)
        if node.overload:
            np_.overload = node.overload
        np_.input.extend(inputs)
        np_.output.extend(v.name for v in node.outputs)
        for name, attr in attrs.items():
            np_.attribute.append(self.attribute(name, attr))
        for k, v in node.metadata.items():
            np_.metadata_props.add(key=k, value=v)
        return pre + [np_]

    def _swap_last_two(self, node: Node, pos: int, inputs: list[str]) -> onnx.NodeProto:
        value = node.inputs[pos]
        rank = value.rank or node.sem.get(f"{('transpose_a', 'transpose_b')[pos]}_rank")
        if rank is None:
            raise ValueError(f"{node.name}: transposed operand {value.name} needs a known rank")
        perm = list(range(rank))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        out = node.graph.names.fresh(f"{value.name}_T")
        inputs[pos] = out
        return helper.make_node("Transpose", [value.name], [out], name=f"{node.name}_transpose{pos}",
                                perm=perm)

    def attribute(self, name: str, attr: Attr) -> AttributeProto:
        t, v = attr.type, attr.value
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "proto":
            return v[1]
        a = AttributeProto()
        a.name = name
        a.type = t
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "ref":
            a.ref_attr_name = v[1]
            return a
        if t == AttributeProto.FLOAT:
            a.f = float(v)
        elif t == AttributeProto.INT:
            a.i = int(v)
        elif t == AttributeProto.STRING:
            a.s = v.encode("utf-8", errors="surrogateescape") if isinstance(v, str) else v
        elif t == AttributeProto.TENSOR:
            a.t.CopyFrom(self.attribute_tensor(v))
        elif t == AttributeProto.GRAPH:
            a.g.CopyFrom(self.graph(v))
        elif t == AttributeProto.FLOATS:
            a.floats.extend(float(x) for x in v)
        elif t == AttributeProto.INTS:
            a.ints.extend(int(x) for x in v)
        elif t == AttributeProto.STRINGS:
            a.strings.extend(x.encode("utf-8", errors="surrogateescape") for x in v)
        elif t == AttributeProto.GRAPHS:
            a.graphs.extend(self.graph(g) for g in v)
        elif t == AttributeProto.TENSORS:
            a.tensors.extend(self.attribute_tensor(x) for x in v)
        else:
            raise ValueError(f"attribute {name}: cannot export type {t}")
        return a

    def attribute_tensor(self, tensor: LazyTensor) -> TensorProto:
        """A tensor attribute, always inline: such tensors are small, and their names (the
        key of the external placeholders) need not be unique, nor even set."""
        name = tensor.proto.name if tensor.proto is not None else ""
        if not tensor.is_external:
            return self.tensor(tensor, name)
        t = TensorProto()
        t.name = name
        t.data_type = dtype_code(tensor.dtype)
        t.dims.extend(tensor.shape)
        t.raw_data = b"".join(tensor.raw_chunks())
        return t

    def tensor(self, tensor: LazyTensor, name: str, whole: bool = True) -> TensorProto:
        """``tensor`` as a TensorProto named ``name``; its own message where unchanged, unless
        the importer left its raw data out of it and ``whole`` asks for all of its numbers."""
        if tensor.is_external and tensor.proto is not None and name:
            t = TensorProto()
            t.name = name
            t.data_type = tensor.proto.data_type
            t.dims.extend(tensor.shape)
            t.data_location = TensorProto.EXTERNAL
            t.external_data.add(key="location", value=EXTERNAL_MARK)
            self.external[name] = tensor
            return t
        proto = tensor.proto
        if proto is not None and proto.name == name and (tensor.raw is None or not whole):
            return proto
        if proto is not None:
            t = TensorProto()
            t.CopyFrom(proto)
            t.name = name
            if tensor.raw is not None:
                t.raw_data = bytes(tensor.raw)
            return t
        t = numpy_helper.from_array(tensor.numpy(), name)
        if t.data_type != dtype_code(tensor.dtype):
            t.data_type = dtype_code(tensor.dtype)
        return t


def _set(message, field: str, text: str) -> None:
    """Set a string field only when it says something: an empty string set explicitly is
    still written (two bytes a field), and a round trip must not make a file heavier."""
    if text:
        setattr(message, field, text)


def _keep_declared_dims(vi: onnx.ValueInfoProto, declared) -> None:
    """Write back the dims the input file declared for a graph output (inference may know the
    same dim under another name); dims it left open keep what inference found."""
    shape = vi.type.tensor_type.shape if vi.type.tensor_type.HasField("shape") else None
    if declared is None or shape is None or len(shape.dim) != len(declared):
        return
    for dim, d in zip(shape.dim, declared):
        if isinstance(d, int):
            dim.dim_value = d
        elif isinstance(d, str):
            dim.dim_param = d


def value_info(v: Value) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto()
    vi.name = v.name
    _set(vi, "doc_string", v.doc_string)
    if v.type_proto is not None:
        vi.type.CopyFrom(v.type_proto)
        return vi
    if v.dtype is None:
        return vi
    tt = vi.type.tensor_type
    tt.elem_type = dtype_code(v.dtype)
    if v.shape is not None:
        shape = tt.shape
        shape.SetInParent()
        for d in v.shape:
            dim = shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif isinstance(d, str) and not sd.is_fresh(d):  # inference's own names stay in
                dim.dim_param = d
    return vi
