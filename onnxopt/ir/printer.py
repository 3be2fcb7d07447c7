"""Readable text for the IR (``onnxopt ir model.onnx``; tests compare against it).

    graph main(%input_ids: int64[batch, seq]) -> (%logits: float32[batch, seq, 1000])
      %wte = const float32[1000, 64]
      %h = Gather(%wte, %input_ids) {axis=0}
      %s = MatMul(%q, %k) <transpose_b>  # by attention

``{...}`` are the ONNX attributes, ``<...>`` the meaning the importer recorded
(explicit reduction axes, transposition flags, layout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxopt.ir.attr import subgraphs_of
from onnxopt.ir.tensor import LazyTensor

if TYPE_CHECKING:
    from onnxopt.ir.graph import Graph
    from onnxopt.ir.node import Node

_SMALL_CONSTANT = 8


def format_graph(graph: Graph, indent: str = "", *, show_types: bool = True) -> str:
    lines: list[str] = []
    ins = ", ".join(f"%{v.name}: {v.type_str()}" for v in graph.inputs)
    outs = ", ".join(f"%{v.name}: {v.type_str()}" for v in graph.outputs)
    lines.append(f"{indent}graph {graph.name}({ins}) -> ({outs}) {{")
    inner = indent + "  "
    for v in graph.constants.values():
        lines.append(f"{inner}%{v.name} = const {_tensor_text(v.const)}")
    for node in graph:
        lines.append(format_node(node, inner, show_types=show_types))
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def format_node(node: Node, indent: str = "", *, show_types: bool = True) -> str:
    outs = ", ".join(
        f"%{v.name}: {v.type_str()}" if show_types else f"%{v.name}" for v in node.outputs)
    ins = ", ".join("_" if v is None else f"%{v.name}" for v in node.inputs)
    parts = []
    subgraphs = []
    for name, a in node.attrs.items():
        graphs = subgraphs_of(a)
        if len(graphs) == 1 and a.type == 5:  # AttributeProto.GRAPH
            subgraphs.append((name, graphs[0]))
            continue
        if graphs:
            subgraphs.extend((f"{name}[{i}]", g) for i, g in enumerate(graphs))
            continue
        parts.append(f"{name}={_attr_text(a.value)}")
    sem = []
    for key, val in node.sem.items():
        if val is True:
            sem.append(key)
        elif val is False or key in ("perm", "reduction_axis") or key.endswith("_rank"):
            continue
        else:
            sem.append(f"{key}={_attr_text(val)}")
    attrs = f" {{{', '.join(parts)}}}" if parts else ""
    if sem:
        attrs += f" <{', '.join(sem)}>"
    note = f"  # by {node.created_by}" if node.created_by else ""
    text = f"{indent}{outs} = {node.qualified_op}({ins}){attrs}{note}"
    for name, g in subgraphs:
        text += f"\n{indent}  {name}:\n" + format_graph(g, indent + "    ", show_types=show_types)
    return text


def _attr_text(val) -> str:
    if isinstance(val, LazyTensor):
        return _tensor_text(val)
    if isinstance(val, float):
        return f"{val:.6g}"
    if isinstance(val, str):
        return repr(val)
    if isinstance(val, tuple) and len(val) == 2 and val[0] in ("ref", "proto"):
        return f"<{val[0]}>"
    if isinstance(val, (list, tuple)):
        return "[" + ", ".join(_attr_text(x) for x in val) + "]"
    return str(val)


def _tensor_text(t: LazyTensor) -> str:
    dims = ", ".join(str(d) for d in t.shape)
    text = f"{t.dtype}[{dims}]"
    if t.is_external:
        return text + " (external)"
    if t.size <= _SMALL_CONSTANT and t.dtype != "string":
        try:
            vals = t.numpy().reshape(-1).tolist()
            text += " " + ("[" + ", ".join(f"{x:.6g}" if isinstance(x, float) else str(x)
                                           for x in vals) + "]")
        except Exception:  # noqa: BLE001, S110 - printing must never fail on an odd tensor
            pass
    return text
