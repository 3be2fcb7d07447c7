"""The kernel registry: every implementation onnxopt can bind a fused op to.

The kernel families are listed here, one module each, as ``onnxopt.rules`` lists the rules:
the ORT native-op families, causal attention in query blocks, our CUDA kernels (whose list
says why each refuses where that backend cannot run), then the decompositions, which are
always there, so every fused op has at least one legal kernel. The list is plain imports,
so the import contract (``pyproject.toml``, ``[tool.importlinter]``) sees every family;
adding a family is its own module plus one line in :data:`FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable

from onnxopt.select import (
    causal_blocks,
    decompose,
    ort_activations,
    ort_attention,
    ort_attention_past,
    ort_norms,
    ort_rotary,
    pycuda_kernels,
)
from onnxopt.select.kernel import Kernel

# Each family's kernel list, in the order selection sees them. Called for every registry
# built, so a family may probe as it builds its list (e.g. whether its runtime can be read).
FAMILIES: tuple[Callable[[], list[Kernel]], ...] = (
    ort_attention.kernels,
    ort_attention_past.kernels,
    ort_norms.kernels,
    ort_activations.kernels,
    ort_rotary.kernels,
    causal_blocks.causal_block_kernels,
    pycuda_kernels.pycuda_kernels,
    decompose.decomposition_kernels,
)


def default_registry() -> list[Kernel]:
    """Every family's kernels; a name given twice is a bug in a family."""
    kernels = [kernel for family in FAMILIES for kernel in family()]
    names = [k.name for k in kernels]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"kernel names registered twice: {', '.join(duplicates)}")
    return kernels
