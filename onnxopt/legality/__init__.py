"""Stage 4: can this rewrite happen here, for this target? Every refusal is a sentence."""

from onnxopt.legality.target import Target, make_target, run_target

__all__ = ["Target", "make_target", "run_target"]
