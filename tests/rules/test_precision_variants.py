"""float16 and int8 variants of the models fuse as their float32 originals do.

float16: onnxconverter-common's conversion (``keep_io_types``: float32 at the
interface, Casts inside). Its output does not always load: for graphs that
already contain ``Cast(to=float)`` it converts what follows to float16 but
leaves the Cast, and ONNX Runtime rejects the type clash. Those Casts are set to
float16, which is what the conversion meant; the test says so when it does.
int8: ONNX Runtime's ``quantize_dynamic`` (MatMulInteger with dynamic
activation quantization).
"""

from __future__ import annotations

import warnings

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline
from onnxopt.verification import verify_models

FUSED = ("attention", "layer_norm", "rms_norm", "group_norm", "group_norm_silu", "gelu", "silu",
         "swiglu", "rotary")


def _fused(path) -> dict[str, int]:
    result = run_pipeline(str(path), OptimizeOptions(target="cpu"))
    fusion = result.report.stages["fuse"]
    return {rule: fusion.count(rule) for rule in FUSED}, result


def to_float16(src, dst) -> None:
    float16 = pytest.importorskip("onnxconverter_common.float16")
    model = onnx.load(str(src))
    del model.graph.value_info[:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        half = float16.convert_float_to_float16(model, keep_io_types=True)
    half.ir_version = 10
    try:
        ort.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - the converter's known Cast clash, repaired below
        outputs = {o.name for o in half.graph.output}
        for node in half.graph.node:
            if node.op_type == "Cast" and not set(node.output) & outputs:
                for a in node.attribute:
                    if a.name == "to" and a.i == TensorProto.FLOAT:
                        a.i = TensorProto.FLOAT16
    onnx.save(half, str(dst))


def to_int8(src, dst) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    try:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    except Exception as e:  # noqa: BLE001 - the quantizer's own failure, before onnxopt runs
        pytest.skip(f"quantize_dynamic cannot process {src.name}: {str(e).splitlines()[0][:120]}")


# Variants that rightly fuse less than their originals.
FEWER_FUSED = {
    # The converter clamps DeBERTa's masked_fill value (float32's lowest) to -10000: a fill
    # that no longer swamps the scores, so it stays a Where (normalize/where_to_additive needs
    # <= -1e30) and attention is refused; as an additive mask it would change fully masked rows.
    ("deberta_v2", "to_float16"): "masked_fill clamped to -10000 is not an additive mask",
}


@pytest.mark.parametrize("convert", [to_float16, to_int8], ids=["float16", "int8"])
def test_variant_fuses_like_the_original(model_path, tmp_path, convert):
    if (reason := FEWER_FUSED.get((model_path.name.split(".")[0], convert.__name__))):
        pytest.xfail(reason)
    variant = tmp_path / f"variant.{convert.__name__}.onnx"
    convert(model_path, variant)
    ort.InferenceSession(str(variant), providers=["CPUExecutionProvider"])
    want, _ = _fused(model_path)
    got, result = _fused(variant)
    assert got == want
    report = verify_models(str(variant), result.proto)
    assert report.ok, report.to_json()
