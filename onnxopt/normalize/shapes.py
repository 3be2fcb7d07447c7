"""Symbolic shape inference and shape-arithmetic folding.

Exporters compute reshape targets at run time: ``Shape → Gather → Unsqueeze
→ Concat → Reshape``. ONNX's own shape inference gives up on most of these
(``unk__17``), and without shapes no pattern can tell heads from head size.
This pass walks the graph once in order and computes, for every value, a
shape whose dims are ints or symbols (``batch``, ``seq``, ``4*seq``), and for
small integer tensors their *contents* (``Value.sym``), e.g.
``(batch, seq, 4, 16)``. Where contents are fully known numbers the
computation is replaced by a constant (shape-arithmetic folding); where they
stay symbolic, matchers can still read them.

The pass reports as changes only the folds it made, so the fixed-point
driver terminates.
"""

from __future__ import annotations

import numpy as np

from onnxopt.ir import symdim as sd
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.graph import Graph
from onnxopt.ir.model import Model
from onnxopt.ir.node import STANDARD_DOMAINS, Node
from onnxopt.ir.semantics import annotate
from onnxopt.ir.tensor import LazyTensor
from onnxopt.ir.value import Value
from onnxopt.normalize.shape_rules import RULES, SYM_RULES, TABLE_SYM_RULES
from onnxopt.rewrite.driver import PassResult

MAX_SYM_ELEMENTS = 16


# A hand walk, not a pattern (onnxopt.rewrite.pattern): one forward walk computing facts for every
# value (shapes, contents): whole-graph facts, not a form rooted at a node.
def infer_shapes(model: Model) -> PassResult:
    """Propagate shapes and small-integer contents; fold fully known ones. Returns the folds
    made. A node whose shape, dtype or contents changed without a fold is said to the rewrite
    driver (``Graph.changed``): not a change the report counts, but one a pass that ran
    earlier may not have seen, so the driver runs those again."""
    return PassResult(sum(_infer_graph(graph, model.fresh_dim)
                          for graph in model.graph.all_graphs()))


def _infer_graph(graph: Graph, fresh) -> int:
    for v in graph.inputs:
        v.shape = _named(_clean_shape(v.shape), fresh)
    for v in graph.constants.values():
        _constant_sym(v)
    folds = 0
    for node in graph:
        if node.domain not in STANDARD_DOMAINS:
            for out in node.outputs:
                out.shape = _named(out.shape, fresh)
            continue
        if node.inferred_from is not None and _unchanged(node):
            continue  # nothing its rule reads changed since it ran: it would give the same
        before = [(o.dtype, o.shape, o.sym) for o in node.outputs]
        axes = node.sem.get("axes")
        folded = _infer_node(graph, node)
        folds += folded
        for out in node.outputs:
            out.shape = _named(out.shape, fresh)
        if axes != node.sem.get("axes") or before != [(o.dtype, o.shape, o.sym)
                                                      for o in node.outputs]:
            graph.changed(node)  # new facts: what read the old ones is looked at again
        node.inferred_from = None if folded else _basis(node)
    return folds


def _unchanged(node: Node) -> bool:
    try:
        return bool(node.inferred_from == _basis(node))
    except (ValueError, TypeError):  # an attribute that compares as an array: not the same
        return False


def _basis(node: Node) -> tuple:
    """Everything a node's inference reads — its op, attributes and meaning, its inputs'
    types, contents and constants — and what it last wrote, its outputs' types and contents
    (a rule's unknown dim keeps the one there). Equal bases give equal results, so a round
    after an edit re-infers only the nodes the edit reached: on a 24-layer GPT-2 the
    settle and cleanup rounds re-inferred every node of the model each time.

    One flat tuple of plain data: values enter by what a rule reads of them, not by identity
    (constants excepted, by identity), so almost nothing kept here is a container the
    garbage collector must keep walking — kept per node, such containers made its full
    collections cost more than the rounds saved."""
    basis: list = [node.op_type, len(node.attrs)]
    for name, a in node.attrs.items():
        basis += (name, a.type, a.value)
    basis.append(len(node.sem))
    for item in node.sem.items():
        basis += item
    inputs = node.inputs
    basis.append(len(inputs))
    for v in inputs:
        basis += _OMITTED if v is None else (v.dtype, v.shape, v.sym, v.const)
    basis.append(len(node.outputs))
    for o in node.outputs:
        basis += (o.dtype, o.shape, o.sym)
    return tuple(basis)


_OMITTED = ("<omitted>", None, None, None)  # an omitted input; no dtype is spelled so


def _infer_node(graph: Graph, node: Node) -> int:
    """One node's shapes and contents; 1 if it was folded into a constant."""
    for v in node.inputs:
        if v is not None and v.const is not None and v.sym is None:
            _constant_sym(v)
    if "axes" in node.sem:
        annotate(node)  # axes made explicit with the rank inference knows now (import may
        #                 have read a declared rank that the computation does not have)
    if not node.inputs or node.inputs[0] is None:
        return 0  # a malformed node (ORT refuses it at run time): nothing to infer
    rule = RULES.get(node.op_type)
    if rule is not None:
        result = _apply(rule, node)
        if result is not None:
            for out, (dtype, shape) in zip(node.outputs, result):
                _merge(out, dtype, shape)
    else:
        for out in node.outputs:
            out.shape = _clean_shape(out.shape)
    sym_rule = SYM_RULES.get(node.op_type)
    if sym_rule is not None and node.op_type not in TABLE_SYM_RULES and any(
            v is not None and v.sym is not None and v.shape is not None and len(v.shape) > 1
            for v in node.inputs):
        sym_rule = None  # a table's contents, which this rule would read as a list
    if sym_rule is not None and len(node.outputs) == 1:
        node.output.sym = _contents(node, _apply(sym_rule, node))
        if node.output.sym is not None and _fold(graph, node):
            return 1
    return 0


def _apply(rule, node: Node):
    """A rule's answer, or ``None`` where the node is malformed in a way the rule did not
    foresee (an omitted input, an attribute of the wrong type): inference is a hint, and a
    malformed node is ONNX Runtime's to refuse, not ours."""
    try:
        return rule(node)
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, AttributeError,
            OverflowError):
        return None


def _contents(node: Node, sym):
    """Contents are tracked for 0-d and 1-d values, and for small tables of a static shape
    (flat, in row-major order: PyTorch's pad lists go through a ``[-1, 2]`` view), which only
    the rules of :data:`TABLE_SYM_RULES` read."""
    shape = node.output.shape
    if sym is None or shape is None:
        return None
    if len(shape) > 1 and not (all(isinstance(d, int) for d in shape)
                               and int(np.prod(shape)) == len(sym) <= MAX_SYM_ELEMENTS):
        return None
    if len(shape) == 0 and len(sym) != 1:
        return None
    if len(shape) == 1 and isinstance(shape[0], int) and shape[0] != len(sym):
        return None
    bound = _INT_BOUNDS.get(node.output.dtype, _INT_BOUNDS["int64"])
    if any(isinstance(x, int) and not bound[0] <= x <= bound[1] for x in sym):
        return None  # ONNX Runtime's integers wrap around where Python's grow: not ours to say
    return tuple(sym)


_INT_BOUNDS = {"int64": (-(2 ** 63), 2 ** 63 - 1), "int32": (-(2 ** 31), 2 ** 31 - 1)}


def _merge(out: Value, dtype: str | None, shape) -> None:
    if dtype is not None:
        out.dtype = dtype
    old = _clean_shape(out.shape)
    if shape is None:
        out.shape = old
        return
    # A dim no int64 holds (a product of corrupt dims): no run of the model has it, since
    # ONNX Runtime's arithmetic wraps where Python's grows. It is not known, not written.
    shape = tuple(None if isinstance(d, int) and not 0 <= d <= _INT_BOUNDS["int64"][1] else d
                  for d in shape)
    if old is not None and len(old) == len(shape):
        shape = tuple(new if new is not None else o for new, o in zip(shape, old))
    out.shape = tuple(shape)


def _named(shape, fresh):
    """``shape`` with each unknown dim given a symbol of its own (``fresh()``): two values
    computed from it then provably share that dim (an expert's gate and up projections of
    the same routed tokens), and a Reshape's -1 divides it out exactly."""
    if shape is None or all(d is not None for d in shape):
        return shape
    return tuple(fresh() if d is None else d for d in shape)


def _clean_shape(shape):
    if shape is None:
        return None
    return tuple(sd.clean(d) for d in shape)


def _constant_sym(v: Value) -> None:
    t = v.const
    if t.dtype not in ("int64", "int32") or len(t.shape) > 1 or t.size > MAX_SYM_ELEMENTS:
        return
    v.sym = tuple(int(x) for x in t.numpy().reshape(-1))


def _fold(graph: Graph, node: Node) -> bool:
    """Replace a value whose contents are all known ints by a constant."""
    out = node.output
    if out.shape is None or not all(isinstance(x, int) for x in out.sym):
        return False
    if out.dtype not in ("int64", "int32"):
        return False
    if not all(isinstance(d, int) for d in out.shape) or int(np.prod(out.shape)) != len(out.sym):
        return False
    arr = np.array(out.sym, dtype=np.int64 if out.dtype == "int64" else np.int32)
    arr = arr.reshape(out.shape)
    const = graph.add_constant(LazyTensor.from_array(arr), hint=out.name + "_folded")
    const.sym = out.sym
    if not replace_value(graph, out, const):
        graph.remove_constant(const)
        return False
    remove_if_dead(graph, node)
    return True
