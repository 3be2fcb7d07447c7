"""Attention's layout, decided once: when select binds a kernel that declares it.

AttentionFused is always BNSH (``[B, H, S, D]``). Exporters split the
projections into heads just before attention (``Reshape`` ``[B, S, H*D]`` →
``[B, S, H, D]``, ``Transpose`` 0,2,1,3) and merge them right after
(``Transpose`` 0,2,1,3, ``Reshape`` → ``[B, S, H*Dv]``). A kernel whose
``Kernel.layout`` is ``"BSH"`` reads Q and writes O packed: it is handed the
projection output the model split, and its output takes the place of the
model's merge, so neither conversion survives and none is emitted. Where the
model spells no such split or merge (Q after a rotary embedding, an output read
in heads), the conversion is emitted here instead. Nothing is absorbed into the
fused op by the rules and undone later.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.node import STANDARD_DOMAINS, Node
from onnxopt.ir.value import Value
from onnxopt.ops.attention import split_heads
from onnxopt.select._emit import BNSH_TO_BSNH, i64, transposed_from


def packed_heads(b, x: Value, heads: int, head_size: int) -> Value:
    """``x`` ``[B, H, S, D]`` as ``[B, S, H*D]``: the model's own packed value where ``x`` is
    its head split of one, else the conversion."""
    bsnh = transposed_from(x, BNSH_TO_BSNH)
    if bsnh is None:
        bsnh = b.op("Transpose", x, perm=list(BNSH_TO_BSNH))
    elif (packed := _split_source(bsnh, heads, head_size)) is not None:
        return packed
    return b.op("Reshape", bsnh, i64(b, [0, 0, heads * head_size], "merge_heads"))


def _split_source(y: Value, heads: int, head_size: int) -> Value | None:
    """``x`` when ``y = Reshape(x)`` turns ``[B, S, H*D]`` into ``[B, S, H, D]``."""
    node = y.producer
    if node is None or node.op_type != "Reshape" or node.domain not in STANDARD_DOMAINS:
        return None
    x = node.inputs[0]
    if x.shape is None or y.shape is None or len(x.shape) != 3 or len(y.shape) != 4:
        return None
    same_rows = sd.same(x.shape[0], y.shape[0]) and sd.same(x.shape[1], y.shape[1])
    split = sd.same(y.shape[2], heads) and sd.same(y.shape[3], head_size)
    return x if same_rows and split and sd.same(x.shape[2], heads * head_size) else None


def model_head_merge(out: Value) -> Node | None:
    """The ``Reshape`` that alone reads ``out`` (``[B, H, S, Dv]``), through a
    ``Transpose`` 0,2,1,3, merging it into ``[B, S, H*Dv]``; else None."""
    if out.rank != 4 or out.num_uses != 1 or out.is_graph_output:
        return None
    transpose = out.uses()[0][0]
    if transposed_from(transpose.output, BNSH_TO_BSNH) is not out:
        return None
    t = transpose.output
    if t.num_uses != 1 or t.is_graph_output:
        return None
    merge, index = t.uses()[0]
    if merge.op_type != "Reshape" or merge.domain not in STANDARD_DOMAINS or index != 0:
        return None
    m = merge.output.shape
    if t.shape is None or m is None or len(t.shape) != 4 or len(m) != 3:
        return None
    if sd.same(m[0], t.shape[0]) and sd.same(m[1], t.shape[1]) and sd.same(
            m[2], sd.mul(t.shape[2], t.shape[3])):
        return merge
    return None


def unpacked_outputs(b, node: Node, packed: Value) -> list[Value]:
    """What a BSH kernel's output ``packed`` (``[B, S, H*Dv]``) gives the BNSH fused node:
    nothing when it takes the place of the model's head merge, else its head split."""
    graph = b.graph
    merge = model_head_merge(node.outputs[0])
    heads, dv = node.inputs[0].shape[1], node.inputs[2].shape[3]
    if merge is not None:
        packed.dtype = packed.dtype or merge.output.dtype
        packed.shape = merge.output.shape
        if replace_value(graph, merge.output, packed):
            transpose = merge.inputs[0].producer
            remove_if_dead(graph, merge)
            remove_if_dead(graph, transpose)
            return []
    return [split_heads(b, packed, heads, dv)]
