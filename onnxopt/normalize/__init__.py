"""Stage 2: same meaning → same form.

One canonicalisation pass per file; :func:`run` applies them in order, repeated
to a fixed point (bounded), and returns how often each pass changed the graph.
"""

from __future__ import annotations

from onnxopt.ir.model import Model
from onnxopt.normalize import driver
from onnxopt.normalize.shapes import infer_shapes
from onnxopt.options import OptimizeOptions


def pass_names() -> list[str]:
    """Every pass by name, in the order :func:`run` applies them."""
    return ["shape arithmetic", *(name for name, _ in driver.PASSES)]


def run(model: Model, options: OptimizeOptions) -> dict[str, int]:
    """Shape inference first (every later pass and pattern reads shapes), then the passes."""
    passes = [(name, fn) for name, fn in [("shape arithmetic", infer_shapes), *driver.PASSES]
              if not options.skips_pass(name)]
    return driver.run_passes(model, debug=options.debug, passes=passes)
