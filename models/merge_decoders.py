"""Merge a decoder's two exports into one model the way Optimum's ``merge_decoders`` does.

A generation loop runs a decoder twice over: once on the prompt with no cache
(``decoder_model``: ``input_ids, attention_mask -> logits, present.*``) and then once per
token with the cache (``decoder_with_past_model``: the same plus ``past_key_values.*``).
Optimum ships both in one file: a bool input ``use_cache_branch`` selects an ``If`` whose
then-branch is the with-past graph and else-branch the no-past graph. The branches read the
model inputs from the outer scope (they have no inputs of their own), so the no-past branch
simply ignores the past inputs (a caller feeds them with length 0), and every initializer
the two exports hold alike is stored once, at the top level.

Written here because Optimum is not installed (and its last merging release needs an older
transformers); only ``onnx`` is used. Nothing is copied from Optimum.
"""

from __future__ import annotations

import hashlib

import onnx
from onnx import helper

FLAG = "use_cache_branch"


def _content_key(t: onnx.TensorProto) -> tuple:
    """Initializers equal in type, shape and bytes share one key, whatever they are called."""
    data = onnx.numpy_helper.to_array(t).tobytes()
    return t.data_type, tuple(t.dims), hashlib.sha256(data).hexdigest()


_INTEGER_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL})


def _stays_in_branch(t: onnx.TensorProto) -> bool:
    """Scalars and 1-D integer tensors (shape arithmetic, axes, a float epsilon) are kept in
    each branch, as Optimum keeps them: they cost nothing twice, and a branch stays readable
    on its own."""
    return len(t.dims) == 0 or (len(t.dims) == 1 and t.data_type in _INTEGER_TYPES)


def _rename_in_graph(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Rename values everywhere in ``graph`` and its subgraphs (node inputs and outputs,
    initializers, value_info, outputs)."""
    if not names:
        return
    for t in graph.initializer:
        t.name = names.get(t.name, t.name)
    for vis in (graph.value_info, graph.output, graph.input):
        for vi in vis:
            vi.name = names.get(vi.name, vi.name)
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
        for a in node.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_in_graph(g, names)


def _defined(graph: onnx.GraphProto) -> set[str]:
    out = {t.name for t in graph.initializer}
    for node in graph.node:
        out.update(n for n in node.output if n)
    return out


def merge_decoders(with_past: onnx.ModelProto, no_past: onnx.ModelProto,
                   graph_name: str = "merged") -> onnx.ModelProto:
    """One model: the with-past inputs plus ``use_cache_branch`` (bool[1]), the same outputs,
    an ``If`` choosing the with-past graph (True) or the no-past graph (False).

    Both exports must name their outputs alike, in the same order, and the no-past inputs
    must be among the with-past ones. Initializers found in both (same type, shape, bytes)
    move to the top level once, under the with-past name, except scalars and 1-D integer
    tensors; the rest stay in their branch.
    Values a branch defines that would shadow a top-level name are renamed.
    """
    wp, np_ = onnx.ModelProto(), onnx.ModelProto()
    wp.CopyFrom(with_past)
    np_.CopyFrom(no_past)
    outputs = [o.name for o in wp.graph.output]
    if [o.name for o in np_.graph.output] != outputs:
        raise ValueError(f"outputs differ: {outputs} vs {[o.name for o in np_.graph.output]}")
    top_inputs = [i.name for i in wp.graph.input]
    missing = [i.name for i in np_.graph.input if i.name not in top_inputs]
    if missing:
        raise ValueError(f"no-past inputs {missing} are not with-past inputs")

    # Initializers shared by content: one top-level copy.
    np_keys = {_content_key(t): t.name for t in np_.graph.initializer}
    shared: list[onnx.TensorProto] = []
    wp_names: dict[str, str] = {}
    np_names: dict[str, str] = {}
    taken = set(top_inputs) | set(outputs)
    for t in wp.graph.initializer:
        key = _content_key(t)
        if key not in np_keys or np_keys[key] in np_names or _stays_in_branch(t):
            continue
        name, k = t.name, 0
        while name in taken:
            k += 1
            name = f"{t.name}_merged_{k}"
        taken.add(name)
        wp_names[t.name] = name
        np_names[np_keys[key]] = name
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = name
        shared.append(copy)
    branches = []
    for model, names, label in ((wp, wp_names, "with_past"), (np_, np_names, "no_past")):
        g = model.graph
        kept = [t for t in g.initializer if t.name not in names]
        del g.initializer[:]
        g.initializer.extend(kept)
        # A value the branch defines must not shadow a top-level one.
        clash = {n: f"{label}/{n}" for n in _defined(g) if n in taken and n not in outputs}
        _rename_in_graph(g, {**names, **clash})
        del g.input[:]
        g.name = label
        branches.append(g)

    flag = helper.make_tensor_value_info(FLAG, onnx.TensorProto.BOOL, [1])
    node = helper.make_node("If", [FLAG], outputs, name="merged::if",
                            then_branch=branches[0], else_branch=branches[1])
    graph = helper.make_graph([node], graph_name, [*with_past.graph.input, flag],
                              list(with_past.graph.output), initializer=shared)
    opsets: dict[str, int] = {}
    for m in (with_past, no_past):
        for o in m.opset_import:
            opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
    merged = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                     for d, v in sorted(opsets.items())])
    functions = {(f.domain, f.name): f for m in (with_past, no_past) for f in m.functions}
    merged.functions.extend(functions.values())
    merged.ir_version = with_past.ir_version
    merged.producer_name = with_past.producer_name
    merged.producer_version = with_past.producer_version
    merged.doc_string = with_past.doc_string.replace("decoder_with_past model",
                                                     "merged decoder (no-past + with-past)")
    return merged
