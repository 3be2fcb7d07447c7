"""The NumPy references: one float64 definition of each fused op and kernel family.

One function per op, here at the bottom of the import contract so that everything that needs
the definition reads the same one: the fused ops (``onnxopt.ops``: their ``reference``, what the
decomposition tests hold a decomposition to), the custom-op bridge's CPU kernels
(``onnxopt.runtime``) and the CUDA kernels' tests. Each function computes in float64 from
whatever it is given (pass inputs *after* rounding them to a kernel's dtype to compare like with
like) and returns float64; the caller rounds to its own dtype. Attributes are plain keywords
here: a fused op's defaults live in its attribute record (``onnxopt.ops``), not in these
signatures' conveniences.
"""

from onnxopt.reference.activations import bias_gelu, gelu, sigmoid, silu, swiglu, swiglu_fused
from onnxopt.reference.attention import BIAS_FLOOR, attention, attention_mask
from onnxopt.reference.dtypes import bfloat16_bits, from_bfloat16_bits, round_to
from onnxopt.reference.norms import group_norm, layer_norm, rms_norm
from onnxopt.reference.rotary import rotary

__all__ = [
    "BIAS_FLOOR",
    "attention",
    "attention_mask",
    "bfloat16_bits",
    "bias_gelu",
    "from_bfloat16_bits",
    "gelu",
    "group_norm",
    "layer_norm",
    "rms_norm",
    "rotary",
    "round_to",
    "sigmoid",
    "silu",
    "swiglu",
    "swiglu_fused",
]
