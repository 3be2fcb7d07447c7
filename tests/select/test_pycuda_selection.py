"""Selection of onnxopt's own CUDA kernels: a pure function of (fused node, target, registry),
so a synthetic CUDA target stands in for a GPU. Chosen kernel, emitted attributes (the
model's facts, never a device-specific choice), and the exact sentence of every rejection."""

from __future__ import annotations

import pytest

from onnxopt.exporter import export_model
from onnxopt.importer import import_model
from onnxopt.legality.target import Target
from onnxopt.select.bind import bind
from onnxopt.select.pycuda_kernels import DOMAIN, pycuda_kernels, shared_memory_limit
from onnxopt.select.registry import default_registry
from onnxopt.select.selector import select_kernel

H100 = Target(device="cuda", compute_capability=(9, 0))
A100 = Target(device="cuda", compute_capability=(8, 0))
T4 = Target(device="cuda", compute_capability=(7, 5))
RTX = Target(device="cuda", compute_capability=(8, 6))
CPU = Target(device="cpu")


def attention_text(dtype="float16", d=64, heads=8, kv=2, kind="causal+key_padding", dv=None,
                   extra=""):
    dv = dv or d
    padding = "key_padding" in kind
    mask = kind != "none"
    inputs = [f"{dtype}[B,{heads},S,{d}] q", f"{dtype}[B,{kv},S,{d}] k",
              f"{dtype}[B,{kv},S,{dv}] v"]
    args = "q, k, v"
    if mask:
        inputs.append(f"{dtype}[B,1,S,S] m")
        args += ", m"
    if padding:
        inputs.append("int64[B,S] pad")
        args += ", pad"
    causal = int("causal" in kind)
    return f"""
    g ({", ".join(inputs)}) => ({dtype}[B,{heads},S,{dv}] o) {{
      o = ai.onnxopt.AttentionFused <num_heads={heads}, kv_num_heads={kv}, scale=0.125,
            head_size={d}, causal={causal}, mask_kind="{kind}"{extra}> ({args})
    }}"""


@pytest.fixture
def fused(make_model):
    """``fused(text)`` -> (model, the ai.onnxopt node), imported into the IR."""

    def make(text: str, opset: int = 18):
        model = import_model(make_model(text, opset=opset, extra_opsets={"ai.onnxopt": 1}))
        return model, next(n for n in model.graph if n.domain == "ai.onnxopt")

    return make


@pytest.fixture(scope="module")
def registry():
    return default_registry()


def reasons(selection) -> dict[str, str]:
    return {k.name: str(r) for k, r in selection.rejected}


def emit(model, node, kernel, target):
    """Bind ``kernel`` in place of ``node``; return the exported graph's custom node."""
    bind(model, node, kernel, target)
    proto = export_model(model)
    ours = [n for n in proto.graph.node if n.domain == DOMAIN]
    assert len(ours) == 1
    return proto, ours[0]


def attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


# --- the records ---------------------------------------------------------------------------------


def test_records_state_the_metadata_capabilities():
    records = {k.name: k for k in pycuda_kernels()}
    assert set(records) == {"pycuda.flash_attention", "pycuda.flash_attention_f32",
                            "pycuda.layer_norm", "pycuda.rms_norm", "pycuda.group_norm",
                            "pycuda.bias_gelu", "pycuda.swiglu"}
    tc, f32 = records["pycuda.flash_attention"], records["pycuda.flash_attention_f32"]
    assert tc.dtypes == {"float16", "bfloat16"} and f32.dtypes == {"float32"}
    assert tc.head_dims is None and f32.head_dims is None  # any multiple of 8 up to 256
    for k in records.values():
        assert k.backend == "pycuda"
        assert k.providers == {"CUDAExecutionProvider"}
        assert k.min_compute_capability == (8, 0)
        assert k.deterministic
        assert k.opsets == {DOMAIN: 1}
        assert k.to_json()["custom_op"].startswith(f"{DOMAIN}::")
    assert tc.to_json()["mask_kinds"] == ["additive", "causal", "causal+key_padding",
                                          "causal+key_padding+window", "causal+window",
                                          "key_padding", "key_padding+window", "none", "window"]
    assert records["pycuda.layer_norm"].dtypes == {"float16", "bfloat16", "float32"}
    assert records["pycuda.group_norm"].dtypes == {"float16", "bfloat16", "float32"}
    assert records["pycuda.group_norm"].implements == "GroupNormFused"
    assert records["pycuda.group_norm"].to_json()["custom_op"] == f"{DOMAIN}::GroupNorm"


def test_shared_memory_limit_is_what_every_gpu_allows_unless_the_target_says():
    # The node does not pin a tile, so selection needs only what every GPU from 8.0 on allows.
    assert shared_memory_limit(H100) == shared_memory_limit(A100) == 99 * 1024
    assert shared_memory_limit(RTX) == 99 * 1024
    assert shared_memory_limit(Target(device="cuda", compute_capability=(9, 0),
                                      shared_memory_bytes=50_000)) == 50_000


# --- attention -----------------------------------------------------------------------------------


def test_soft_capped_attention_is_not_ours(fused, registry):
    _, node = fused(attention_text(extra=", softcap=50.0"))
    selection = select_kernel(node, H100, registry)
    assert reasons(selection)["pycuda.flash_attention"] == (
        "does not soft-cap the scores (the node caps them at 50)")
    assert selection.chosen.backend == "decompose"


def test_attention_binds_to_flash_attention_with_the_models_facts_only(fused, registry):
    model, node = fused(attention_text())
    selection = select_kernel(node, H100, registry)
    assert selection.chosen.name == "pycuda.flash_attention"
    assert reasons(selection)["pycuda.flash_attention_f32"] == "does not support dtype float16"
    proto, custom = emit(model, node, selection.chosen, H100)
    assert custom.op_type == "FlashAttention"
    assert attrs(custom) == {"scale": pytest.approx(0.125), "causal": 1}  # no tile, no entry
    # Q, K, V, the padding as a [B, 1, 1, S] bias, and the key range of each row.
    assert list(custom.input[:3]) == ["q", "k", "v"] and len(custom.input) == 6
    producers = {o: n.op_type for n in proto.graph.node for o in n.output}
    assert [producers[i] for i in custom.input[3:]] == ["Unsqueeze", "Cast", "ReduceMax"]
    assert any(o.domain == DOMAIN and o.version == 1 for o in proto.opset_import)


@pytest.mark.parametrize("kind", ["none", "causal", "key_padding"])
def test_attention_mask_kinds_the_kernel_builds_itself(fused, registry, kind):
    model, node = fused(attention_text(kind=kind))
    selection = select_kernel(node, H100, registry)
    assert selection.chosen.name == "pycuda.flash_attention"
    _, custom = emit(model, node, selection.chosen, H100)
    assert attrs(custom)["causal"] == int("causal" in kind)
    assert "m" not in custom.input  # the additive mask is replaced by ranges and a bias
    assert len(custom.input) == (6 if "key_padding" in kind else 3)


@pytest.mark.parametrize("kind", ["causal+window", "causal+key_padding+window", "window",
                                  "key_padding+window"])
def test_bands_are_built_by_the_kernel_from_the_window(fused, registry, kind):
    """Sliding-window and local attention: the kernel takes the window (and skips the key
    tiles outside the band); the mask input is dropped as for a causal mask."""
    model, node = fused(attention_text(kind=kind, extra=", window=31"))
    selection = select_kernel(node, H100, registry)
    assert selection.chosen.name == "pycuda.flash_attention"
    _, custom = emit(model, node, selection.chosen, H100)
    assert attrs(custom) == {"scale": pytest.approx(0.125), "causal": int("causal" in kind),
                             "window": 31}
    assert "m" not in custom.input
    assert len(custom.input) == (6 if "key_padding" in kind else 3)


def test_additive_mask_is_passed_as_the_bias(fused, registry):
    """ALiBi, relative positions, any float mask: the kernel adds it (behaviour changed: it
    used to be rejected with "our kernel takes key padding as lengths, not an additive
    mask")."""
    model, node = fused(attention_text(kind="additive"))
    selection = select_kernel(node, H100, registry)
    assert selection.chosen.name == "pycuda.flash_attention"
    _, custom = emit(model, node, selection.chosen, H100)
    assert list(custom.input) == ["q", "k", "v", "m"]
    assert attrs(custom)["causal"] == 0


@pytest.mark.parametrize("target, dtype, d, reason", [
    (H100, "float16", 100, "head size 100 is not a multiple of 8 up to 256"),
    (H100, "float16", 264, "head size 264 is not a multiple of 8 up to 256"),
    (H100, "float", 64, "does not support dtype float32"),
    (T4, "float16", 64, "needs compute capability 8.0"),
    (CPU, "float16", 64, "runs only on CUDA"),
    (Target(device="cuda", compute_capability=(8, 6), shared_memory_bytes=64 * 1024),
     "float16", 128, ("needs 87040 bytes of shared memory per block even with its smallest tile "
                     "(64x64), the target allows 65536")),
])
def test_attention_rejections(fused, registry, target, dtype, d, reason):
    _, node = fused(attention_text(dtype=dtype, d=d))
    selection = select_kernel(node, target, registry)
    assert reasons(selection)["pycuda.flash_attention"] == reason
    assert selection.chosen.name != "pycuda.flash_attention"


def test_value_head_size_must_match(fused, registry):
    _, node = fused(attention_text(dv=32))
    assert reasons(select_kernel(node, H100, registry))["pycuda.flash_attention"] == (
        "%v: V's head size 32 differs from Q's 64; the kernel needs one head size")


@pytest.mark.parametrize("d", [32, 80, 96, 128, 256])
def test_every_head_size_binds_and_the_node_is_the_same_for_every_gpu(fused, registry, d):
    """The emitted node does not depend on the GPU the model was optimized for: a model
    optimized on an H100 runs on an RTX 4090 (the tile is chosen when the kernel loads)."""
    nodes = []
    for target in (H100, A100, RTX, Target(device="cuda", compute_capability=(8, 9))):
        model, node = fused(attention_text(d=d))
        selection = select_kernel(node, target, registry)
        assert selection.chosen.name == "pycuda.flash_attention", reasons(selection)
        _, custom = emit(model, node, selection.chosen, target)
        nodes.append(custom.SerializeToString())
    assert len(set(nodes)) == 1


def test_float32_attention_uses_the_cuda_core_kernel(fused, registry):
    model, node = fused(attention_text(dtype="float", kind="causal"))
    ours = [k for k in registry if k.backend in ("pycuda", "decompose")]
    selection = select_kernel(node, H100, ours)
    assert selection.chosen.name == "pycuda.flash_attention_f32"
    _, custom = emit(model, node, selection.chosen, H100)
    assert attrs(custom) == {"scale": pytest.approx(0.125), "causal": 1}


def test_strict_determinism_keeps_our_deterministic_kernels(fused, registry):
    _, node = fused(attention_text())
    strict = Target(device="cuda", compute_capability=(9, 0), determinism="strict")
    kernel = next(k for k in registry if k.name == "pycuda.flash_attention")
    assert kernel.rejects(node, strict) is None


# --- norms and activations -----------------------------------------------------------------------

LN = """
g ({t}[B,S,{h}] x, {g}[{h}] gamma, {t}[{h}] beta, {t}[B,S,{h}] r) => ({o}[B,S,{h}] y, {t}[B,S,{h}] s) {{
  y, s = ai.onnxopt.LayerNormFused <epsilon=0.001, has_residual=1{extra}> (x, gamma, beta, r)
}}"""


def test_layer_norm_with_residual_and_sum(fused, registry):
    model, node = fused(LN.format(t="float16", g="float16", o="float16", h=64, extra=""))
    selection = select_kernel(node, H100, registry)
    assert selection.chosen.name == "pycuda.layer_norm"
    _, custom = emit(model, node, selection.chosen, H100)
    assert custom.op_type == "LayerNorm" and len(custom.output) == 2
    assert list(custom.input) == ["x", "gamma", "beta", "r"]
    assert attrs(custom) == {"epsilon": pytest.approx(0.001)}


@pytest.mark.parametrize("t, g, o, h, extra, reason", [
    ("float16", "float", "float16", 64, "",
     "%gamma: gamma is float32, X is float16: the kernel reads every input in one dtype"),
    ("float16", "float16", "float", 64, "",
     "the output is float32, the input float16: the kernel writes its input's dtype"),
    ("float", "float", "float", 64, ', compute_dtype="float64"',
     "computes its statistics in float64; the kernel computes them in float32"),
    ("float16", "float16", "float16", 40000, "",
     ("hidden size 40000 is above the supported maximum for float16 (32768 with VEC=8, 8192 "
     "with VEC=1; VEC > 1 needs hidden % VEC == 0 and 16-byte aligned pointers)")),
])
def test_layer_norm_rejections(fused, registry, t, g, o, h, extra, reason):
    _, node = fused(LN.format(t=t, g=g, o=o, h=h, extra=extra))
    assert reasons(select_kernel(node, H100, registry))["pycuda.layer_norm"] == reason


def test_rms_norm_float32(fused, registry):
    model, node = fused("""
    g (float[B,S,64] x, float[64] gamma) => (float[B,S,64] y) {
      y = ai.onnxopt.RMSNormFused <epsilon=0.000001> (x, gamma)
    }""")
    selection = select_kernel(node, H100, registry)
    assert selection.chosen.name == "pycuda.rms_norm"
    _, custom = emit(model, node, selection.chosen, H100)
    assert (custom.op_type, list(custom.input)) == ("RMSNorm", ["x", "gamma"])
    assert attrs(custom) == {"epsilon": pytest.approx(1e-6)}


GN = """
g ({t}[{x}] x, {g}[{c}] gamma, {t}[{c}] beta) => ({o}[{x}] y) {{
  y = ai.onnxopt.GroupNormFused <groups={groups}, epsilon=0.000001{extra}> (x, {args})
}}"""


def group_norm_text(t="float16", x="N,128,64,64", c=128, groups=32, g=None, o=None,
                    extra=', activation="silu"', args="gamma, beta"):
    return GN.format(t=t, x=x, c=c, groups=groups, g=g or t, o=o or t, extra=extra, args=args)


@pytest.mark.parametrize("t", ["float16", "bfloat16", "float"])
def test_group_norm_binds_with_the_models_facts(fused, registry, t):
    """16384 elements per group (4 channels x 64 x 64): every GPU generation, one node."""
    nodes = []
    for target in (H100, A100, RTX):
        model, node = fused(group_norm_text(t=t))
        selection = select_kernel(node, target, registry)
        assert selection.chosen.name == "pycuda.group_norm", reasons(selection)
        _, custom = emit(model, node, selection.chosen, target)
        nodes.append(custom.SerializeToString())
    assert len(set(nodes)) == 1
    assert (custom.op_type, list(custom.input)) == ("GroupNorm", ["x", "gamma", "beta"])
    assert attrs(custom) == {"groups": 32, "epsilon": pytest.approx(1e-6), "activation": b"silu"}


@pytest.mark.parametrize("x, args, inputs", [
    ("N,64,H,W", "gamma", ["x", "gamma"]),  # spatial size known at run time only
    ("N,64", "", ["x"]),  # rank 2: one position per channel
    ("2,64,5,7,3", ", beta", ["x", "", "beta"]),  # rank 5, beta without gamma
])
def test_group_norm_optional_weights_and_shapes(fused, registry, x, args, inputs):
    model, node = fused(group_norm_text(x=x, c=64, groups=8, extra="", args=args))
    selection = select_kernel(node, H100, registry)
    assert selection.chosen.name == "pycuda.group_norm", reasons(selection)
    _, custom = emit(model, node, selection.chosen, H100)
    assert list(custom.input) == inputs
    assert attrs(custom) == {"groups": 8, "epsilon": pytest.approx(1e-6), "activation": b""}


@pytest.mark.parametrize("target, kw, reason", [
    (CPU, {}, "runs only on CUDA"),
    (T4, {}, "needs compute capability 8.0"),
    (H100, {"t": "double"}, "does not support dtype float64"),
    (H100, {"extra": ', activation="gelu"'},
     "applies the activation 'gelu'; the kernel applies none or 'silu'"),
    (H100, {"g": "float"},
     "%gamma: gamma is float32, X is float16: the kernel reads every input in one dtype"),
    (H100, {"o": "float"},
     "the output is float32, the input float16: the kernel writes its input's dtype"),
    (H100, {"x": "N,C,64,64"}, "%x: the channel count C is not static"),
    (H100, {"x": "N,96,8,8", "c": 96, "groups": 36}, "%x: 96 channels do not split into 36 groups"),
    (H100, {"x": "N,128,8,8", "c": 64},
     "%gamma: gamma has shape [64]; the kernel takes one value per channel ([128])"),
    (H100, {"x": "1,32,32768,32769", "c": 32},
     ("%x: a group holds 1073774592 elements, above the kernel's limit of 1073741824 (int32 "
      "indexing inside a group)")),
    (H100, {"x": "1073741824,32,2,2", "c": 32},
     "%x: 34359738368 blocks (batch x groups), more than the 2147483647 a grid holds"),
])
def test_group_norm_rejections(fused, registry, target, kw, reason):
    _, node = fused(group_norm_text(**kw))
    selection = select_kernel(node, target, registry)
    assert reasons(selection)["pycuda.group_norm"] == reason
    assert selection.chosen.backend == "decompose"


@pytest.mark.parametrize("target, kw, code, subject", [
    (CPU, {}, "provider_not_supported", ""),
    (H100, {"t": "double"}, "dtype_not_supported", "x"),
    (H100, {"extra": ', activation="gelu"'}, "activation_not_supported", ""),
    (H100, {"g": "float"}, "mixed_dtypes", "gamma"),
    (H100, {"x": "N,96,8,8", "c": 96, "groups": 36}, "groups_do_not_split", "x"),
])
def test_group_norm_rejections_carry_a_code_and_their_subject(fused, registry, target, kw, code,
                                                             subject):
    _, node = fused(group_norm_text(**kw))
    refused = {k.name: r for k, r in select_kernel(node, target, registry).rejected}
    assert (refused["pycuda.group_norm"].code, refused["pycuda.group_norm"].subject) == (
        code, subject)


def test_group_norm_shapes_at_the_limit_bind(fused, registry):
    # 32 channels x 32768 positions = 2^30 elements per group: the streaming variant's limit.
    _, node = fused(group_norm_text(x="1,32,32768,32", c=32, extra=""))
    assert select_kernel(node, H100, registry).chosen.name == "pycuda.group_norm"


def test_bias_gelu(fused, registry):
    model, node = fused("""
    g (float16[B,S,128] x, float16[128] bias) => (float16[B,S,128] y) {
      y = ai.onnxopt.GeluFused <approximate="tanh"> (x, bias)
    }""")
    selection = select_kernel(node, H100, registry)
    assert selection.chosen.name == "pycuda.bias_gelu"
    _, custom = emit(model, node, selection.chosen, H100)
    assert custom.op_type == "BiasGelu"
    assert attrs(custom) == {"approximate": b"tanh"}


def test_bias_over_another_axis_is_rejected(fused, registry):
    _, node = fused("""
    g (float16[B,S,128] x, float16[S,128] bias) => (float16[B,S,128] y) {
      y = ai.onnxopt.GeluFused (x, bias)
    }""")
    assert reasons(select_kernel(node, H100, registry))["pycuda.bias_gelu"] == (
        "%bias: the bias has shape ['S', 128]; the kernel adds a bias over the last axis "
        "([128]) only")


def test_swiglu_and_its_broadcast_rejection(fused, registry):
    model, node = fused("""
    g (bfloat16[B,S,96] gate, bfloat16[B,S,96] up) => (bfloat16[B,S,96] y) {
      y = ai.onnxopt.SwiGLUFused (gate, up)
    }""")
    selection = select_kernel(node, H100, registry)
    assert selection.chosen.name == "pycuda.swiglu"
    _, custom = emit(model, node, selection.chosen, H100)
    assert attrs(custom) == {}
    _, node = fused("""
    g (float16[B,S,96] gate, float16[1,1,96] up) => (float16[B,S,96] y) {
      y = ai.onnxopt.SwiGLUFused (gate, up)
    }""")
    assert reasons(select_kernel(node, H100, registry))["pycuda.swiglu"] == (
        "%up: gate and up are not provably one shape; the kernel does not broadcast")


def test_cpu_target_never_emits_our_ops(models_dir):
    from onnxopt.options import OptimizeOptions
    from onnxopt.pipeline import run_pipeline

    for name in ("gpt2.ts", "llama.dynamo", "diffusion.ts"):
        result = run_pipeline(str(models_dir / f"{name}.onnx"), OptimizeOptions(target="cpu"))
        assert not [n for n in result.proto.graph.node if n.domain == DOMAIN]
        rejected = {k.name: r for s in result.report.stages["select"].selections
                    for k, r in s.rejected if k.backend == "pycuda"}
        assert rejected and {str(r) for r in rejected.values()} == {"runs only on CUDA"}
        assert {r.code for r in rejected.values()} == {"provider_not_supported"}
