"""A mean folded into the bias is taken back out: the value is centred, then scaled.

    Add(Mul(x, s), Sub(β, Mul(m, s)))  ->  Add(Mul(Sub(x, m), s), β),   m = ReduceMean(x)

(either operand order in the Muls and the Add; ``β`` a constant).

Why: TensorFlow's ``batch_normalization`` arithmetic, which tf2onnx writes for norms
converted from TensorFlow and JAX, scales first and subtracts the scaled mean inside the
bias: ``x·s + (β − m·s)`` with ``s = rstd·γ``. Every other exporter centres first,
``(x − m)·s + β``, and that is the form the LayerNorm pattern reads. The two are the same
function; the centred one is the more accurate (``x·s`` and ``m·s`` are large and nearly
equal where the spread is small against the mean, and their difference cancels digits).

Only when ``m`` is a ``keepdims`` ReduceMean of this same ``x`` (so the rewrite centres
something, and ``x − m`` broadcasts to ``x``'s shape), the same value ``s`` scales both,
and the two products and the bias difference are read by nothing else.
"""

from __future__ import annotations

from onnxopt.ir import symdim as sd
from onnxopt.ir.builder import NodeBuilder
from onnxopt.ir.edit import remove_if_dead, replace_value
from onnxopt.ir.exactness import site
from onnxopt.ir.graph import Graph
from onnxopt.ir.node import Node
from onnxopt.match.pattern import Builder, Match, Pat
from onnxopt.refusal import Refusal
from onnxopt.rewrite.pattern import PatternRewrite, case

NAME = "centered_shift"


def _keeps_dims(node: Node) -> Refusal | None:
    if node.sem.get("keepdims", True):
        return None
    return Refusal("meaning_differs", "the mean drops the reduced axes", node.name)


def _pattern(p: Builder) -> Pat:
    """Add(Mul(x, s), Sub(β, Mul(ReduceMean(x), s))), each operand order of the Add and the
    Muls tried (a search: the first order whose ``x`` and ``s`` fit both products), the
    products and the difference read by the next node alone."""
    x, s = p.var("x"), p.var("s")
    mean = p.ReduceMean(x, name="mean", check=_keeps_dims, other_inputs=True, other_attrs=True)
    scaled = p.Mul(x, s, name="scaled", private=True, other_attrs=True)
    shift = p.Sub(p.const("beta"), p.Mul(mean, s, name="mul", private=True, other_attrs=True),
                  name="shift", private=True, other_attrs=True)
    return p.Add(scaled, shift, other_attrs=True)


def _rewrite(graph: Graph, m: Match) -> bool:
    add, x, s, beta = m.root, m.x, m.s, m.beta
    mean = m.mean.output
    dtype = add.output.dtype
    if dtype is None or not (x.dtype == s.dtype == mean.dtype == beta.dtype == dtype):
        return False
    build = NodeBuilder(graph, add, NAME, by_op=True)
    d = build.node("Sub", [x, mean], dtype=dtype, shape=sd.broadcast_shapes(x.shape, mean.shape))
    ds = build.node("Mul", [d.output, s], dtype=dtype,
                    shape=sd.broadcast_shapes(d.output.shape, s.shape))
    out = build.node("Add", [ds.output, beta], dtype=dtype, shape=add.output.shape)
    if not replace_value(graph, add.output, out.output, inexact=site(NAME, add)):
        graph.remove([out, ds, d])
        return False
    remove_if_dead(graph, add, m.shift, m.scaled, m.mul)
    return True


# A search (``exhaustive``): ``x`` and ``s`` are found in the first product, and the second
# must agree; a first product read the other way round is retried. Not bit-exact (another
# grouping of the same function): a site of onnxopt.ir.exactness.
centered_shift = PatternRewrite.of(case(_pattern, ("Add",), _rewrite, permits=NAME,
                                        exhaustive=True))
