"""Evaluating a model, or a piece cut out of one, in ONNX Runtime (quietly).

The one place stages call down into to run something: mask probes (legality),
constant folding's reference evaluation (normalize), kernel timing (select), the
safeguard's load check and verification.
"""

from onnxopt.evaluation.cut import cone, subgraph_model
from onnxopt.evaluation.ort import (
    all_node_protos,
    first_line,
    native_path,
    run,
    session,
    uses_onnxopt_kernels,
)
from onnxopt.evaluation.reference import evaluate_node
from onnxopt.evaluation.sizes import first_consistent, padding_mask, size_alternatives

__all__ = ["all_node_protos", "cone", "evaluate_node", "first_consistent", "first_line",
           "native_path", "padding_mask", "run",
           "session", "size_alternatives", "subgraph_model", "uses_onnxopt_kernels"]
