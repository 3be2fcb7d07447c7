"""Commutative ops take their constant operands last.

Why: ``x * 0.125`` and ``0.125 * x`` are one computation; exporters write
either. With constants always second, a pattern writes ``Mul(x, const)`` once
instead of twice, and common-subexpression elimination sees equal keys. The
order among non-constant operands is kept (a stable partition), so the pass is
deterministic and idempotent. Broadcasting is symmetric, so the result's shape
and every element are unchanged (IEEE addition and multiplication commute). Only
two-operand nodes are reordered: a variadic ``Sum`` of three or more would round
in another order.
"""

from __future__ import annotations

from onnxopt.ir.model import Model
from onnxopt.ir.semantics import COMMUTATIVE, STANDARD_DOMAINS
from onnxopt.rewrite.driver import PassResult


# A hand walk, not a pattern (onnxopt.rewrite.pattern): one node's operand order for every
# commutative op: nothing below the root to match.
def commutative_order(model: Model) -> PassResult:
    """Put constant operands of commutative ops last; return how many nodes changed."""
    count = 0
    for graph in model.graph.all_graphs():
        for node in graph:
            if node.domain not in STANDARD_DOMAINS or node.op_type not in COMMUTATIVE:
                continue
            inputs = node.inputs
            if len(inputs) != 2 or any(v is None for v in inputs):
                continue
            ordered = [v for v in inputs if v.const is None] + [v for v in inputs if v.const is not None]
            if any(a is not b for a, b in zip(ordered, inputs)):
                graph.set_inputs(node, ordered)
                count += 1
    return PassResult(count)
