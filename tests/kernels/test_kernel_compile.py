"""The shipped kernel images build with nvcc (no GPU) for every listed architecture, every entry
point without register spills; a single specialisation compiles alone (the guard defines);
and the compile cache keys on what it should.

Build time: the full set (4 families x sm_80, sm_86, sm_89, sm_90 + compute_90 PTX, 70 entry
points each) is built once per test session into a temporary folder, as many nvcc processes
at a time as there are CPUs (about 70 s on 2 cores); the single-specialisation test compiles
a representative subset (one entry per kernel kind and head-dim extreme) instead of all 70.
"""

from __future__ import annotations

import shutil

import pytest

from onnxopt.runtime.cuda import compiler, devices, metadata

MAX_REGISTERS_PER_SM = 65536

pytestmark = pytest.mark.skipif(compiler.find_nvcc() is None, reason="nvcc not found")


def threads_per_block(family: str, v: dict) -> int:
    if family == "flash_attention":
        return 32 * v["WARPS"]
    # the __launch_bounds__ of the entry
    return 1024 if family in ("layer_norm", "group_norm") else 256


def test_images_exist_for_every_family_and_target(built_images):
    folder, images = built_images
    assert {(i.family, i.target) for i in images} == {
        (f, t) for f in metadata.FAMILIES for t in compiler.TARGETS}
    for image in images:
        data = image.path.read_bytes()
        for v in metadata.variants(image.family):
            assert v["entry"].encode() in data, (image.path.name, v["entry"])
    assert (folder / compiler.MANIFEST).is_file()


@pytest.mark.parametrize("arch", compiler.SASS_ARCHS)
@pytest.mark.parametrize("family", metadata.FAMILIES)
def test_every_entry_point_compiles_without_spills(built_images, family, arch):
    _, images = built_images
    (image,) = [i for i in images if i.family == family and i.target == arch]
    usage = image.resources
    assert set(usage) == {v["entry"] for v in metadata.variants(family)}
    largest = max(r.smem_optin for r in devices.TABLE.values())
    for v in metadata.variants(family):
        res = usage[v["entry"]]
        assert res.spill_stores == 0 and res.spill_loads == 0, (v["entry"], res)
        assert res.stack_bytes == 0, (v["entry"], res)
        assert res.registers * threads_per_block(family, v) <= MAX_REGISTERS_PER_SM, res
        assert res.static_smem + metadata.smem_bytes(family, v) <= largest


SUBSET = ["fa_tc_f16_d32_bm64_bn64", "fa_tc_bf16_d256_bm128_bn32", "fa_simt_f32_d256_bm16_bn32",
          "ln_bf16_v8", "gn_f16_v8", "gn_bf16_v1_stream", "gelu_f16_v8", "swiglu_f32_v1"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cubin")


@pytest.mark.parametrize("entry", SUBSET)
def test_one_specialisation_compiles_alone(entry, cache):
    family = next(f for f in metadata.FAMILIES
                  if entry in {v["entry"] for v in metadata.variants(f)})
    built = compiler.compile_cubin(
        metadata.source_path(family), "sm_80", (compiler.spec_define(entry),), cache=cache)
    usage = compiler.parse_ptxas(built.log)
    assert set(usage) == {entry}, "exactly the requested specialisation is instantiated"
    assert usage[entry].spill_stores == 0


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


def test_the_build_module_needs_only_the_standard_library():
    """setup.py loads compiler.py by path in an isolated build environment (no onnx, no
    numpy): it must import with the standard library alone."""
    import subprocess
    import sys

    path = compiler.__file__
    code = ("import importlib.util, sys; "
            f"spec = importlib.util.spec_from_file_location('c', {str(path)!r}); "
            "m = importlib.util.module_from_spec(spec); sys.modules['c'] = m; "
            "spec.loader.exec_module(m); print(m.TARGETS)")
    out = subprocess.run([sys.executable, "-S", "-I", "-c", code], capture_output=True,
                         text=True, check=True).stdout
    assert "sm_80" in out and "compute_90" in out


def test_kernels_build_without_nvcc_is_one_line(monkeypatch, capsys):
    from onnxopt.cli import main

    monkeypatch.setattr(compiler, "find_nvcc", lambda: None)
    assert main(["kernels", "--build"]) == 2
    assert capsys.readouterr().err == (
        "onnxopt: error: --build needs nvcc: install the CUDA toolkit or set ONNXOPT_NVCC\n")
