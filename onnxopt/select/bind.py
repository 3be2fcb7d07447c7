"""Emit a chosen kernel in place of its fused node."""

from __future__ import annotations

from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.model import Model
from onnxopt.ir.node import Node
from onnxopt.legality.target import Target
from onnxopt.ops import attributes_of
from onnxopt.select import layout
from onnxopt.select.kernel import Kernel, Layout


def bind(model: Model, node: Node, kernel: Kernel, target: Target) -> list[Node]:
    """Replace ``node`` by ``kernel``'s emitted nodes; returns them.

    The kernel is handed the node's attribute record; the builder carries the model's opset
    (decompositions spell ops for it), and the kernel's other domains are added to the
    model's opset imports.
    """
    graph = node.graph or model.graph
    # Named by op type (``Mul_3``), not after the kernel: each node's metadata names its kernel
    # already, and ``select:decompose.LayerNormFused/ReduceMean_1_out0`` on every node and value
    # made a model whose region was emitted as the same decomposition come out bigger.
    b = NodeBuilder(graph, node, f"select:{kernel.name}", opset=model.opset, by_op=True)
    fed_by = [v.producer for v in node.inputs if v is not None]  # before the kernel rewires
    outputs = kernel.emit(b, node, attributes_of(node), target)
    if kernel.layout == Layout.BSH:
        outputs = layout.unpacked_outputs(b, node, *outputs)
    for emitted in b.nodes:
        _drop_trailing_omitted_inputs(graph, emitted)
        # The file says which kernel a node belongs to (node metadata), but the exporter gives
        # the values of "created" nodes value_info, and declaring the symbolic shapes of these
        # intermediates made ONNX Runtime's CPU runs 2-4% slower (TorchScript GPT-2/BERT/LLaMA
        # exports at batch 8: memory planning); ORT infers them itself.
        emitted.metadata.update(kernel_metadata(kernel))
        emitted.created_by = ""
    if len(outputs) < len([o for o in node.outputs if o.num_uses or o.is_graph_output]):
        raise ValueError(f"{kernel.name} emitted {len(outputs)} outputs for {node.name}")
    for old, new in zip(node.outputs, outputs):
        new.dtype = new.dtype or old.dtype
        if new.shape is None:
            new.shape = old.shape
        if not replace_value(graph, old, new):  # a graph output that cannot take the name
            alias = b.op("Identity", new)
            alias.dtype, alias.shape = old.dtype, old.shape
            replace_value(graph, old, alias)
    remove_if_dead(graph, node)
    # What fed only the node and what the kernel took over (a key/value cache Concat whose
    # present output the kernel now writes) is unread now: gone here, not left to cleanup.
    remove_if_dead(graph, *fed_by)
    for domain, version in kernel.opsets.items():
        model.require_opset(domain, version)
    return b.nodes


def kernel_metadata(kernel: Kernel) -> dict[str, str]:
    """What the file says of a node's kernel: its name, and the length where it switches plans
    (verification then runs the model past that length too)."""
    meta = {"onnxopt.kernel": kernel.name}
    if kernel.switch_seq:
        meta["onnxopt.switch_seq"] = str(kernel.switch_seq)
    return meta


def _drop_trailing_omitted_inputs(graph, node: Node) -> None:
    """``Op(x, g, "")`` → ``Op(x, g)``: the same in ONNX, and ONNX Runtime 1.31 crashes
    (segmentation fault) creating a session with ``LayerNormalization(x, g, "")``."""
    inputs = list(node.inputs)
    if not inputs or inputs[-1] is not None:
        return
    while inputs and inputs[-1] is None:
        inputs.pop()
    graph.set_inputs(node, inputs)
