"""Stage 2: same meaning → same form.

One canonicalisation pass per file; :func:`run` applies them in order, repeated
to a fixed point (bounded), and returns how often each pass changed the graph.
"""

from __future__ import annotations

from onnxopt.ir.model import Model
from onnxopt.normalize.driver import run_passes
from onnxopt.options import OptimizeOptions


def run(model: Model, options: OptimizeOptions) -> dict[str, int]:
    return run_passes(model, debug=options.debug)
