"""Stage 5: fusion rules, one per file. ``all_rules()`` lists them in priority order.

Every rule has a name of its own (the regions and hold-back units carry it); a block that
reaches onnxopt in two spellings has a rule for each, sharing one ``family`` (the name
``--only``/``--disable`` take): ``layer_norm`` and ``layer_norm_op``, ``group_norm`` and
``group_norm_op`` (:class:`onnxopt.rules.base.Rule`).
"""

from __future__ import annotations

from onnxopt.rules.attention import Attention
from onnxopt.rules.base import Rule
from onnxopt.rules.gelu import Gelu
from onnxopt.rules.group_norm import GroupNorm, GroupNormOp, GroupNormPerChannel, GroupNormSilu
from onnxopt.rules.layer_norm import LayerNorm, LayerNormOp
from onnxopt.rules.quantized_attention import QuantizedAttention
from onnxopt.rules.rms_norm import RMSNorm
from onnxopt.rules.rotary import Rotary
from onnxopt.rules.silu import Silu
from onnxopt.rules.single_query_attention import SingleQueryAttention
from onnxopt.rules.swiglu import SwiGLU


def all_rules() -> list[Rule]:

    return [
        Attention(),
        SingleQueryAttention(),
        QuantizedAttention(),
        LayerNormOp(), LayerNorm(),
        RMSNorm(),
        GroupNormOp(), GroupNorm(),
        GroupNormPerChannel(),
        GroupNormSilu(),
        Gelu(),
        Silu(),
        SwiGLU(),
        Rotary(),
    ]
