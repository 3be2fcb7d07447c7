"""The normalization passes, in order, run to a fixed point by the rewrite driver.

A pass is a function ``(model) -> PassResult``. The driver
(:func:`onnxopt.rewrite.driver.run_to_fixed_point`) runs each again whenever the graph was
edited since it last began — it hears the edits themselves — until none was; under
``debug`` it verifies the IR after every pass.
"""

from __future__ import annotations

from collections.abc import Callable

from onnxopt.ir.model import Model
from onnxopt.normalize.canonical_scale import canonical_scale
from onnxopt.normalize.centered_shift import centered_shift
from onnxopt.normalize.centered_variance import centered_variance
from onnxopt.normalize.commutative_order import commutative_order
from onnxopt.normalize.constant_reshape_target import constant_reshape_target
from onnxopt.normalize.cubic_factored import cubic_factored
from onnxopt.normalize.elementwise_out_of_split import elementwise_out_of_split
from onnxopt.normalize.eliminate_common_subexpressions import eliminate_common_subexpressions
from onnxopt.normalize.eliminate_dead_code import eliminate_dead_code
from onnxopt.normalize.fold_constants import fold_constants
from onnxopt.normalize.gemm_unflattened import gemm_unflattened
from onnxopt.normalize.merge_reshapes import merge_reshapes
from onnxopt.normalize.remove_noops import remove_noops
from onnxopt.normalize.rstd_canonical import rstd_canonical
from onnxopt.normalize.scale_through_layout import scale_through_layout
from onnxopt.normalize.share_equal_shapes import share_equal_shapes
from onnxopt.normalize.softmax_canonical import softmax_canonical
from onnxopt.normalize.softmax_out_of_merge import softmax_out_of_merge
from onnxopt.normalize.transpose_into_matmul import transpose_into_matmul
from onnxopt.normalize.transpose_through_reshape import transpose_through_reshape
from onnxopt.normalize.unmerge_heads import unmerge_heads
from onnxopt.normalize.where_to_additive import where_to_additive
from onnxopt.rewrite.driver import PassResult, run_to_fixed_point

Pass = Callable[[Model], PassResult]

# Order: make numbers numbers and drop debris first (so use counts are honest), then share
# what is equal, then put what remains into canonical forms. The round repeats until quiet.
PASSES: list[tuple[str, Pass]] = [
    ("fold_constants", fold_constants),
    ("remove_noops", remove_noops),
    ("eliminate_dead_code", eliminate_dead_code),
    ("share_equal_shapes", share_equal_shapes),
    ("eliminate_common_subexpressions", eliminate_common_subexpressions),
    ("commutative_order", commutative_order),
    ("scale_through_layout", scale_through_layout),
    ("canonical_scale", canonical_scale),
    ("constant_reshape_target", constant_reshape_target),
    ("gemm_unflattened", gemm_unflattened),
    ("elementwise_out_of_split", elementwise_out_of_split),
    ("merge_reshapes", merge_reshapes),
    ("unmerge_heads", unmerge_heads),
    ("softmax_out_of_merge", softmax_out_of_merge),
    ("transpose_through_reshape", transpose_through_reshape),
    ("transpose_into_matmul", transpose_into_matmul),
    ("softmax_canonical", softmax_canonical),
    ("where_to_additive", where_to_additive),
    ("centered_variance", centered_variance),
    ("centered_shift", centered_shift),
    ("rstd_canonical", rstd_canonical),
    ("cubic_factored", cubic_factored),
]

# The passes some of whose rewrites are not bit-exact (each such rewrite a site of
# onnxopt.ir.exactness, made only where the run's policy permits it): a reciprocal for a
# division, a regrouped product or sum, another softmax or variance form, a fold by NumPy
# where ONNX Runtime's kernel rounds otherwise, ``x + 0`` for ``x`` (``-0 + 0`` is ``+0``).
# Every other pass computes bit for bit what the model did.
NOT_EXACT = frozenset({
    "fold_constants", "remove_noops", "canonical_scale", "gemm_unflattened",
    "softmax_canonical", "where_to_additive", "centered_variance", "centered_shift",
    "rstd_canonical", "cubic_factored",
})


def run_passes(model: Model, *, debug: bool = False,
               passes: list[tuple[str, Pass]] | None = None) -> dict[str, int]:
    """Every pass until the graph settles (:func:`run_to_fixed_point`): a pass runs again only
    where something was edited since it last began, so the sweep that only confirms the fixed
    point runs each pass once at most. Returns how often each pass changed the graph (the
    passes that did)."""
    passes = PASSES if passes is None else passes
    results = run_to_fixed_point(model, passes, debug=debug)
    return {name: r.changed for name, r in results.items()}
