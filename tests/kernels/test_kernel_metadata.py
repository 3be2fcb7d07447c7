"""The kernels' declarations (kernels/*.json) against the sources (entry points, parameter lists)
and the table of device limits, and the wrappers' variant selection per GPU generation (pure
functions). No GPU needed; the smem cross-check needs nvcc."""

from __future__ import annotations

import re
import subprocess

import pytest

from onnxopt.runtime.cuda import activations, attention, compiler, devices, metadata, norms

CU_TYPES = {"__half": "float16", "__nv_bfloat16": "bfloat16", "float": "float32"}


def entries_in_source(family: str) -> dict[str, list[str]]:
    """Entry-point macro invocations in the .cu: name -> macro arguments after the name."""
    text = metadata.source_path(family).read_text()
    found = {}
    for macro, args in re.findall(r"^(\w+_ENTRY)\(([^)]*)\)\s*$", text, re.MULTILINE):
        name, *rest = [a.strip() for a in args.split(",")]
        found[name] = [macro, *rest]
        guard = f"defined(ONNXOPT_SPEC_{name})"
        assert guard in text, f"{name} has no {guard} guard"
    return found


@pytest.mark.parametrize("family", metadata.FAMILIES)
def test_every_variant_is_instantiated_and_vice_versa(family):
    declared = {v["entry"] for v in metadata.variants(family)}
    instantiated = set(entries_in_source(family))
    assert declared == instantiated


def test_flash_attention_variants_match_their_instantiation():
    src = entries_in_source("flash_attention")
    for v in metadata.variants("flash_attention"):
        macro, *args = src[v["entry"]]
        if v["kind"] == "tc":
            assert macro == "FA_TC_ENTRY"
            cu_type, d, nwarps, bn, _minb = args
            assert CU_TYPES[cu_type] == v["dtype"]
            assert (int(d), int(bn), int(nwarps)) == (v["DMAX"], v["BN"], v["WARPS"])
            assert v["BM"] == 16 * v["WARPS"]
        else:
            assert macro == "FA_SIMT_ENTRY" and v["dtype"] == "float32"
            d, nwarps, rpw = (int(a) for a in args)
            assert (d, nwarps, nwarps * rpw) == (v["DMAX"], v["WARPS"], v["BM"])
            assert v["BN"] == 32


def test_norm_and_activation_variants_match_their_instantiation():
    src = entries_in_source("layer_norm")
    for v in metadata.variants("layer_norm"):
        _, cu_type, vec, maxit = src[v["entry"]]
        assert (CU_TYPES[cu_type], int(vec), int(maxit)) == (v["dtype"], v["VEC"], v["MAXIT"])
    src = entries_in_source("group_norm")
    for v in metadata.variants("group_norm"):
        macro, cu_type, vec, maxit = src[v["entry"]]
        assert macro == "GN_ENTRY"
        assert (CU_TYPES[cu_type], int(vec), int(maxit)) == (v["dtype"], v["VEC"], v["MAXIT"])
        assert v["entry"].endswith("_stream") == (v["MAXIT"] == 0)
    src = entries_in_source("activations")
    for v in metadata.variants("activations"):
        macro, cu_type, vec = src[v["entry"]]
        assert macro == f"{v['op'].upper()}_ENTRY"
        assert (CU_TYPES[cu_type], int(vec)) == (v["dtype"], v["VEC"])


def test_attention_covers_every_head_size_up_to_256():
    for dtype in ("float16", "bfloat16", "float32"):
        for d in range(8, 257, 8):
            assert attention.head_size_reason(dtype, d) is None
            assert attention.bucket(dtype, d)[0]["DMAX"] >= d
    for d in (0, 12, 100, 264):
        assert attention.head_size_reason("float16", d) == (
            f"head size {d} is not a multiple of 8 up to 256")


@pytest.mark.parametrize("family", metadata.FAMILIES)
def test_shared_memory_fits_every_declared_tile(family):
    largest = max(r.smem_optin for r in devices.TABLE.values())
    for v in metadata.variants(family):
        smem = metadata.smem_bytes(family, v)
        assert 0 <= smem <= largest, (v["entry"], smem)


def test_every_head_size_has_a_tile_that_every_gpu_fits():
    """Selection may bind any head size without knowing the GPU only because the smallest tile
    of every bucket fits the smallest per-block shared memory of every generation from 8.0."""
    floor = devices.portable_smem_limit((8, 0))
    assert floor == 99 * 1024
    for dtype in ("float16", "bfloat16", "float32"):
        for d in range(8, 257, 8):
            smallest = attention.bucket(dtype, d)[-1]
            assert metadata.smem_bytes("flash_attention", smallest) <= floor, (dtype, d)


C_TYPES = {"ptr": ("*",), "i32": ("int",), "i64": ("long long",), "f32": ("float",)}


def _signature(text: str, macro: str) -> list[tuple[str, str]]:
    """(name, kind) of each parameter in a ``#define macro(...)`` parameter list."""
    start = text.index(f"#define {macro}")
    lines = []
    for line in text[start:].splitlines():
        lines.append(line.rstrip("\\ "))
        if not line.rstrip().endswith("\\"):
            break
    body = " ".join(lines)
    body = body[body.index(")") + 1:]  # past the macro's own parameters
    if "NAME(" in body:  # an entry macro: the kernel's parameter list
        body = body[body.index("NAME(") + 5:]
        body = body[:body.index(")")]
    params = []
    for part in body.split(","):
        part = part.strip().rstrip("{").strip()
        words = part.replace("*", " * ").split()
        if not words:
            continue
        name = words[-1]
        kind = ("ptr" if "*" in words else "i64" if "long" in words else
                "f32" if "float" in words else "i32")
        params.append((name, kind))
    return params


def test_parameter_lists_are_the_declared_ones():
    """The .cu signatures state the declared parameter lists (kernels/*.json "params"), from
    which the launch packing is generated (launch_args)."""
    text = metadata.source_path("flash_attention").read_text()
    got = _signature(text, "FA_PARAMS(T)")
    assert got == metadata.params("flash_attention")
    text = metadata.source_path("layer_norm").read_text()
    assert _signature(text, "LN_ENTRY(NAME, TYPE, VEC, MAXIT)") == metadata.params("layer_norm")
    text = metadata.source_path("group_norm").read_text()
    assert _signature(text, "GN_ENTRY(NAME, TYPE, VEC, MAXIT)") == metadata.params("group_norm")
    text = metadata.source_path("activations").read_text()
    for op, macro in (("gelu", "GELU_ENTRY(NAME, TYPE, VEC)"),
                      ("swiglu", "SWIGLU_ENTRY(NAME, TYPE, VEC)")):
        assert _signature(text, macro) == metadata.params("activations", op)


def test_flash_attention_smem_formula_values():
    v = metadata.variant("flash_attention", "fa_tc_bf16_d128_bm128_bn64")
    assert metadata.smem_bytes("flash_attention", v) == (128 + 4 * 64) * 136 * 2 == 104448
    v = metadata.variant("flash_attention", "fa_tc_f16_d256_bm64_bn32")
    assert metadata.smem_bytes("flash_attention", v) == (64 + 4 * 32) * 264 * 2 == 99 * 1024
    v = metadata.variant("flash_attention", "fa_simt_f32_d128_bm16_bn32")
    assert metadata.smem_bytes("flash_attention", v) == (16 * 128 + 32 * 129 + 32 * 128) * 4


def test_layer_norm_max_hidden_covers_8192():
    meta = metadata.load("layer_norm")
    for v in metadata.variants("layer_norm"):
        assert metadata.evaluate(meta["max_hidden"], v) >= 8192, v["entry"]


def test_group_norm_holds_a_group_of_32768_in_registers_when_vectorised():
    """16384 elements per group (SD-style 128 channels / 32 groups at 64 x 64) and 32768 stay in
    registers; every dtype has a cached and a streaming variant per vector width."""
    meta = metadata.load("group_norm")
    cached = {}
    for v in metadata.variants("group_norm"):
        if v["MAXIT"]:
            cached[(v["dtype"], v["VEC"])] = metadata.evaluate(meta["max_cached_group"], v)
    assert cached == {("float32", 4): 32768, ("float32", 1): 8192, ("float16", 8): 32768,
                      ("float16", 1): 8192, ("bfloat16", 8): 32768, ("bfloat16", 1): 8192}
    streamed = {(v["dtype"], v["VEC"]) for v in metadata.variants("group_norm") if not v["MAXIT"]}
    assert streamed == set(cached)
    assert meta["max_group"] == 2**30 and meta["activations"] == {"": 0, "silu": 1}


def test_formula_evaluator_is_arithmetic_only():
    assert metadata.evaluate("(A + 2) * B // 3", {"A": 1, "B": 4}) == 4
    with pytest.raises(ValueError):
        metadata.evaluate("__import__('os')", {})
    with pytest.raises(KeyError):
        metadata.evaluate("A * C", {"A": 1})


def test_smem_formula_equals_the_kernels_own_constants(tmp_path):
    """Compile a host program that prints fa::TcCfg / fa::SimtCfg::SMEM_BYTES for every variant and
    compare with the JSON formula the launcher uses."""
    nvcc = compiler.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    lines = []
    for v in metadata.variants("flash_attention"):
        if v["kind"] == "tc":
            t = {"float16": "__half", "bfloat16": "__nv_bfloat16"}[v["dtype"]]
            expr = f"fa::TcCfg<{t}, {v['DMAX']}, {v['WARPS']}, {v['BN']}>::SMEM_BYTES"
        else:
            rpw = v["BM"] // v["WARPS"]
            expr = f"fa::SimtCfg<{v['DMAX']}, {v['WARPS']}, {rpw}>::SMEM_BYTES"
        lines.append(f'    std::printf("%s %d\\n", "{v["entry"]}", (int)({expr}));')
    src = tmp_path / "smem_check.cu"
    src.write_text(
        f'#include "{metadata.source_path("flash_attention")}"\n#include <cstdio>\n'
        "int main() {\n" + "\n".join(lines) + "\n    return 0;\n}\n"
    )
    exe = tmp_path / "smem_check"
    subprocess.run([nvcc, "-std=c++17", "-arch=sm_80", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    printed = dict(line.split() for line in out.strip().splitlines())
    for v in metadata.variants("flash_attention"):
        assert int(printed[v["entry"]]) == metadata.smem_bytes("flash_attention", v), v["entry"]


# --- variant selection ---------------------------------------------------------------------------


H100 = devices.DeviceLimits.from_attributes({
    "compute_capability_major": 9, "compute_capability_minor": 0, "multiprocessor_count": 132})


def test_attention_selects_the_big_tile_unless_the_grid_is_too_small():
    v = attention.select_variant("bf16", 128, H100, sq=4096, batch_heads=64)
    assert v["entry"] == "fa_tc_bf16_d128_bm128_bn64"
    v = attention.select_variant("float16", 64, H100, sq=128, batch_heads=8)
    assert v["entry"] == "fa_tc_f16_d64_bm64_bn64"
    assert attention.select_variant("float32", 64, H100)["kind"] == "simt"
    assert attention.select_variant("fp16", 128, H100, tile=(64, 64))["BM"] == 64
    assert attention.select_variant("fp16", 80, H100)["entry"] == "fa_tc_f16_d96_bm128_bn64"


# (compute capability, head size, dtype) -> the tile chosen when the grid is large: the
# largest that the generation's real per-block shared memory (devices.TABLE) fits.
TILES_BY_GENERATION = [
    ((8, 0), 128, "float16", "fa_tc_f16_d128_bm128_bn64"),  # 104448 <= 163 KiB
    ((8, 6), 128, "float16", "fa_tc_f16_d128_bm64_bn64"),  # 104448 > 99 KiB
    ((8, 9), 128, "bfloat16", "fa_tc_bf16_d128_bm64_bn64"),
    ((9, 0), 128, "bfloat16", "fa_tc_bf16_d128_bm128_bn64"),
    ((8, 0), 256, "float16", "fa_tc_f16_d256_bm128_bn32"),  # 135168 <= 163 KiB
    ((8, 6), 256, "float16", "fa_tc_f16_d256_bm64_bn32"),  # exactly 99 KiB
    ((8, 9), 256, "float16", "fa_tc_f16_d256_bm64_bn32"),
    ((9, 0), 256, "float16", "fa_tc_f16_d256_bm128_bn32"),
    ((8, 6), 96, "float16", "fa_tc_f16_d96_bm128_bn64"),  # (128 + 256) * 104 * 2 = 79872
    ((8, 6), 160, "bfloat16", "fa_tc_bf16_d160_bm128_bn32"),  # 256 * 168 * 2 = 86016
    ((8, 9), 192, "bfloat16", "fa_tc_bf16_d192_bm64_bn32"),  # 102400 > 99 KiB
    ((12, 0), 192, "float16", "fa_tc_f16_d192_bm64_bn32"),
    ((8, 7), 192, "float16", "fa_tc_f16_d192_bm128_bn32"),  # Orin: 163 KiB
]


@pytest.mark.parametrize(("cc", "d", "dtype", "entry"), TILES_BY_GENERATION)
def test_tile_choice_per_gpu_generation(cc, d, dtype, entry):
    limits = devices.for_capability(cc)
    v = attention.select_variant(dtype, d, limits, sq=4096, batch_heads=256)
    assert v["entry"] == entry
    assert metadata.smem_bytes("flash_attention", v) <= limits.smem_optin


def test_an_unknown_gpu_gets_a_safe_tile_not_an_error():
    limits = devices.for_capability((13, 5))  # no such row: the most conservative one
    assert limits.smem_optin == 99 * 1024
    assert attention.select_variant("float16", 256, limits)["entry"] == "fa_tc_f16_d256_bm64_bn32"


def test_attention_rejects_unsupported_head_dim_and_tile():
    with pytest.raises(ValueError, match="head size 100"):
        attention.select_variant("float16", 100, H100)
    with pytest.raises(ValueError, match="tile"):
        attention.select_variant("float16", 64, H100, tile=(256, 64))
    with pytest.raises(ValueError, match="dtype"):
        attention.select_variant("int8", 64, H100)


def test_bias_strides():
    full = (2, 4, 5, 9)
    assert attention.bias_strides((2, 4, 5, 9), full) == (180, 45, 9, 1)
    assert attention.bias_strides((1, 4, 1, 9), full) == (0, 9, 0, 1)
    assert attention.bias_strides((9,), full) == (0, 0, 0, 1)
    assert attention.bias_strides((2, 1, 5, 1), full) == (5, 0, 1, 0)
    with pytest.raises(ValueError, match="does not broadcast"):
        attention.bias_strides((3, 1, 1, 9), full)


def test_norm_selection_vectorises_when_aligned():
    v, threads = norms.select_variant("bfloat16", 4096, 0x1000, 0x2000)
    assert v["VEC"] == 8 and threads == 256
    v, threads = norms.select_variant("bfloat16", 4096, 0x1002)  # misaligned pointer
    assert v["VEC"] == 1 and threads == 1024
    v, _ = norms.select_variant("float32", 1000, 0x1000)  # 1000 % 4 == 0
    assert v["VEC"] == 4
    v, threads = norms.select_variant("float16", 1001, 0x1000)
    assert v["VEC"] == 1 and threads == 512
    v, threads = norms.select_variant("float32", 8192, 0x1000)
    assert v["VEC"] == 4 and threads == 1024
    with pytest.raises(ValueError, match="maximum"):
        norms.select_variant("float32", 8193, 0x1000)  # only the scalar path fits 8193 % 4 != 0


@pytest.mark.parametrize("dtype, group, spatial, ptr, entry, threads", [
    ("float16", 4 * 4096, 4096, 0x1000, "gn_f16_v8", 1024),  # 128 ch / 32 groups at 64 x 64
    ("bfloat16", 32768, 4096, 0x1000, "gn_bf16_v8", 1024),  # the register limit exactly
    ("bfloat16", 32776, 4097 * 8, 0x1000, "gn_bf16_v8_stream", 1024),  # just above it
    ("float16", 10 * 4096, 4096, 0x1000, "gn_f16_v8_stream", 1024),  # 320 ch / 32 at 64 x 64
    ("float16", 4 * 4096, 4096, 0x1002, "gn_f16_v1_stream", 1024),  # misaligned: scalar
    ("float16", 8 * 1024, 1024, 0x1002, "gn_f16_v1", 1024),  # scalar, 8 per thread
    ("float32", 40 * 64, 64, 0x1000, "gn_f32_v4", 320),  # 1280 ch / 32 at 8 x 8
    ("float32", 4 * 49, 49, 0x1000, "gn_f32_v1", 128),  # 7 x 7: no vector fits a channel
    ("float16", 4 * 12, 12, 0x1000, "gn_f16_v1", 32),  # 12 % 8 != 0
    ("fp32", 2, 1, 0x1000, "gn_f32_v1", 32),  # rank 2: one position per channel
    ("float32", 2**30, 2**20, 0x1000, "gn_f32_v4_stream", 1024),
])
def test_group_norm_selection(dtype, group, spatial, ptr, entry, threads):
    v, got_threads = norms.select_group_variant(dtype, group, spatial, ptr, 0x2000)
    assert (v["entry"], got_threads) == (entry, threads)
    if v["MAXIT"]:
        assert -(-group // v["VEC"] // threads) <= v["MAXIT"]
    assert group % v["VEC"] == 0 and spatial % v["VEC"] == 0


def test_group_norm_selection_refuses_a_group_above_the_limit():
    with pytest.raises(ValueError, match="a group holds 1073741825 elements, above the kernel's "
                                         "limit of 1073741824"):
        norms.select_group_variant("float32", 2**30 + 1, 2**30 + 1, 0x1000)
    with pytest.raises(ValueError, match="dtype"):
        norms.select_group_variant("int8", 64, 64, 0x1000)


def test_activation_selection():
    assert activations.select_variant("gelu", "float16", 4096, 0x100)["VEC"] == 8
    assert activations.select_variant("gelu", "float16", 4100, 0x100)["VEC"] == 1
    assert activations.select_variant("swiglu", "float32", 64, 0x100, 0x108)["VEC"] == 1
    assert activations.select_variant("swiglu", "float32", 64, 0x100, 0x110)["VEC"] == 4
