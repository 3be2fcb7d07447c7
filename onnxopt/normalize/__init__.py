"""Stage 2: same meaning → same form.

One canonicalisation pass per file; :func:`run` applies them in order through the rewrite
driver (:mod:`onnxopt.rewrite.driver`: each pass again only after an edit, until none),
and returns how often each pass changed the graph. Passes said in the pattern language are
:class:`onnxopt.rewrite.pattern.PatternRewrite` s; the others walk the graph by hand, each
with a comment saying why a pattern cannot say it.
"""

from __future__ import annotations

from onnxopt.ir.model import Model
from onnxopt.normalize import driver
from onnxopt.normalize.shapes import infer_shapes
from onnxopt.options import OptimizeOptions


def pass_names() -> list[str]:
    """Every pass by name, in the order :func:`run` applies them."""
    return ["shape arithmetic", *(name for name, _ in driver.PASSES)]


def passes(options: OptimizeOptions) -> list[tuple[str, driver.Pass]]:
    """Shape inference first (every later pass and pattern reads shapes), then the passes,
    less those ``options`` skip."""
    return [(name, fn) for name, fn in [("shape arithmetic", infer_shapes), *driver.PASSES]
            if not options.skips_pass(name)]


def run(model: Model, options: OptimizeOptions) -> dict[str, int]:
    """Every pass of :func:`passes`, until the graph settles."""
    return driver.run_passes(model, debug=options.debug, passes=passes(options))
