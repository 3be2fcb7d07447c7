"""Every specialisation the wrappers can launch compiles with nvcc for sm_80 and sm_90, one at a
time exactly as the loader builds it, without register spills; and the compile cache keys on
what it should. Needs nvcc, no GPU."""

from __future__ import annotations

import shutil

import pytest

from onnxopt.runtime.cuda import compiler, metadata

ARCHS = ("sm_80", "sm_90")
MAX_REGISTERS_PER_SM = 65536

pytestmark = pytest.mark.skipif(compiler.find_nvcc() is None, reason="nvcc not found")

SPECS = [
    pytest.param(family, v, arch, id=f"{v['entry']}-{arch}")
    for family in metadata.FAMILIES
    for v in metadata.variants(family)
    for arch in ARCHS
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cubin")


def threads_per_block(family: str, v: dict) -> int:
    if family == "flash_attention":
        return 32 * v["WARPS"]
    return 1024 if family == "layer_norm" else 256  # the __launch_bounds__ of the entry


@pytest.mark.parametrize(("family", "v", "arch"), SPECS)
def test_specialisation_compiles_without_spills(family, v, arch, cache):
    entry = v["entry"]
    built = compiler.compile_cubin(
        metadata.source_path(family), arch, (compiler.spec_define(entry),), cache=cache
    )
    assert entry.encode() in built.cubin.read_bytes()
    usage = compiler.parse_ptxas(built.log)
    assert set(usage) == {entry}, "exactly the requested specialisation is instantiated"
    res = usage[entry]
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    assert res.stack_bytes == 0, res
    assert res.registers * threads_per_block(family, v) <= MAX_REGISTERS_PER_SM, res
    static_plus_dynamic = res.static_smem + metadata.smem_bytes(family, v)
    assert static_plus_dynamic <= metadata.MAX_SMEM_OPTIN


@pytest.mark.parametrize("family", metadata.FAMILIES)
def test_whole_file_compiles(family, cache):
    built = compiler.compile_cubin(
        metadata.source_path(family), "sm_90", ("ONNXOPT_SPEC_ALL",), cache=cache
    )
    assert set(compiler.parse_ptxas(built.log)) == {v["entry"] for v in metadata.variants(family)}


def test_cache_hits_and_keys(tmp_path):
    src_dir = tmp_path / "src"
    shutil.copytree(metadata.kernels_dir(), src_dir)
    source = src_dir / "activations.cu"
    defines = (compiler.spec_define("gelu_f32_v1"),)
    first = compiler.compile_cubin(source, "sm_80", defines, cache=tmp_path / "c")
    again = compiler.compile_cubin(source, "sm_80", defines, cache=tmp_path / "c")
    assert not first.cached and again.cached and again.cubin == first.cubin
    other = compiler.compile_cubin(source, "sm_90", defines, cache=tmp_path / "c")
    assert other.cubin != first.cubin
    # A change in an included header changes the key.
    header = src_dir / "common.cuh"
    header.write_text(header.read_text() + "\n// touched\n")
    touched = compiler.compile_cubin(source, "sm_80", defines, cache=tmp_path / "c")
    assert not touched.cached and touched.cubin != first.cubin


def test_compile_error_is_reported(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k() { this is not C++; }\n')
    with pytest.raises(compiler.CompileError, match="nvcc failed"):
        compiler.compile_cubin(bad, "sm_80", cache=tmp_path / "c")


def test_parse_ptxas():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
    8 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 256 bytes smem
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Function properties for b
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 0 barriers
"""
    usage = compiler.parse_ptxas(log)
    assert usage["a"] == compiler.Resources(64, 4, 8, 8, 256)
    assert usage["b"] == compiler.Resources(30, 0, 0, 0, 0)


def test_arch_for():
    assert compiler.arch_for((9, 0)) == "sm_90"
    assert compiler.arch_for((8, 6)) == "sm_86"
