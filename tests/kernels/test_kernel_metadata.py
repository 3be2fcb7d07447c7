"""The launch metadata (kernels/*.json) against the sources and the device limits, and the
wrappers' variant selection (pure functions). No GPU needed; the smem cross-check needs nvcc."""

from __future__ import annotations

import re
import subprocess

import pytest

from onnxopt.runtime.cuda import activations, attention, compiler, metadata, norms

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
            assert (int(d), int(bn), int(nwarps)) == (v["head_dim"], v["BN"], v["WARPS"])
            assert v["BM"] == 16 * v["WARPS"]
        else:
            assert macro == "FA_SIMT_ENTRY" and v["dtype"] == "float32"
            d, nwarps, rpw = (int(a) for a in args)
            assert (d, nwarps, nwarps * rpw) == (v["head_dim"], v["WARPS"], v["BM"])
            assert v["BN"] == 32


def test_norm_and_activation_variants_match_their_instantiation():
    src = entries_in_source("layer_norm")
    for v in metadata.variants("layer_norm"):
        _, cu_type, vec, maxit = src[v["entry"]]
        assert (CU_TYPES[cu_type], int(vec), int(maxit)) == (v["dtype"], v["VEC"], v["MAXIT"])
    src = entries_in_source("activations")
    for v in metadata.variants("activations"):
        macro, cu_type, vec = src[v["entry"]]
        assert macro == f"{v['op'].upper()}_ENTRY"
        assert (CU_TYPES[cu_type], int(vec)) == (v["dtype"], v["VEC"])


def test_attention_covers_the_declared_capabilities():
    have = {(v["dtype"], v["head_dim"]) for v in metadata.variants("flash_attention")}
    for dtype in ("float16", "bfloat16", "float32"):
        for d in (64, 128):
            assert (dtype, d) in have


@pytest.mark.parametrize("family", metadata.FAMILIES)
def test_shared_memory_fits_every_declared_tile(family):
    for v in metadata.variants(family):
        smem = metadata.smem_bytes(family, v)
        assert 0 <= smem <= metadata.MAX_SMEM_OPTIN, (v["entry"], smem)


def test_flash_attention_smem_formula_values():
    v = metadata.variant("flash_attention", "fa_tc_bf16_d128_bm128_bn64")
    assert metadata.smem_bytes("flash_attention", v) == (128 + 4 * 64) * 136 * 2 == 104448
    v = metadata.variant("flash_attention", "fa_simt_f32_d128_bm16_bn32")
    assert metadata.smem_bytes("flash_attention", v) == (16 * 128 + 32 * 129 + 32 * 128) * 4


def test_layer_norm_max_hidden_covers_8192():
    meta = metadata.load("layer_norm")
    for v in metadata.variants("layer_norm"):
        assert metadata.evaluate(meta["max_hidden"], v) >= 8192, v["entry"]


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
            expr = f"fa::TcCfg<{t}, {v['head_dim']}, {v['WARPS']}, {v['BN']}>::SMEM_BYTES"
        else:
            rpw = v["BM"] // v["WARPS"]
            expr = f"fa::SimtCfg<{v['head_dim']}, {v['WARPS']}, {rpw}>::SMEM_BYTES"
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


def test_attention_selects_the_big_tile_unless_the_grid_is_too_small():
    v = attention.select_variant("bf16", 128, sq=4096, batch_heads=64, sm_count=132)
    assert v["entry"] == "fa_tc_bf16_d128_bm128_bn64"
    v = attention.select_variant("float16", 64, sq=128, batch_heads=8, sm_count=132)
    assert v["entry"] == "fa_tc_f16_d64_bm64_bn64"
    assert attention.select_variant("float32", 64)["kind"] == "simt"
    assert attention.select_variant("fp16", 128, tile=(64, 64))["BM"] == 64
    assert attention.select_variant("fp16", 128, tile="fa_tc_f16_d128_bm64_bn64")["BM"] == 64


def test_attention_rejects_unsupported_head_dim_and_tile():
    with pytest.raises(ValueError, match="head dim 96"):
        attention.select_variant("float16", 96)
    with pytest.raises(ValueError, match="tile"):
        attention.select_variant("float16", 64, tile=(256, 64))
    with pytest.raises(ValueError, match="dtype"):
        attention.select_variant("int8", 64)


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


def test_activation_selection():
    assert activations.select_variant("gelu", "float16", 4096, 0x100)["VEC"] == 8
    assert activations.select_variant("gelu", "float16", 4100, 0x100)["VEC"] == 1
    assert activations.select_variant("swiglu", "float32", 64, 0x100, 0x108)["VEC"] == 1
    assert activations.select_variant("swiglu", "float32", 64, 0x100, 0x110)["VEC"] == 4
