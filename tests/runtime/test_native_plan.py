"""The library and the Python side read one declaration: the argument packing generated into
the library is the JSON's parameter list, its choices of specialisation and launch geometry are
the Python launch wrappers', and its float16/bfloat16 conversions are NumPy's and ml_dtypes'."""

from __future__ import annotations

import ctypes
import itertools

import ml_dtypes
import numpy as np
import pytest

from onnxopt.runtime import library
from onnxopt.runtime.cuda import activations, attention, devices, metadata, norms

CODES = {"float32": 1, "float16": 10, "bfloat16": 16}


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(library.path())
    lib.onnxopt_ops_signature.restype = ctypes.c_char_p
    lib.onnxopt_ops_signature.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    i64, i32, err = ctypes.c_int64, ctypes.c_int, ctypes.c_char_p
    lib.onnxopt_ops_choose_attention.restype = ctypes.c_char_p
    lib.onnxopt_ops_choose_attention.argtypes = [i32, i32, i32, i32, i32, i64, i64, err]
    lib.onnxopt_ops_choose_norm.restype = ctypes.c_char_p
    lib.onnxopt_ops_choose_norm.argtypes = [i32, i64, i32, ctypes.POINTER(i32), err]
    lib.onnxopt_ops_choose_group_norm.restype = ctypes.c_char_p
    lib.onnxopt_ops_choose_group_norm.argtypes = [i32, i64, i64, i32, ctypes.POINTER(i32), err]
    lib.onnxopt_ops_choose_activation.restype = ctypes.c_char_p
    lib.onnxopt_ops_choose_activation.argtypes = [ctypes.c_char_p, i32, i64, i32, err]
    lib.onnxopt_ops_round.argtypes = [i32, ctypes.c_void_p, ctypes.c_size_t]
    return lib


def test_the_library_is_built_from_the_sources_here():
    assert library.built_from(library.path()) == library.expected_hash()


def test_packing_is_the_declared_parameter_list(lib):
    declared = {}
    for family in metadata.FAMILIES:
        params = metadata.load(family)["params"]
        for op in (params if isinstance(params, dict) else [None]):
            name = family if op is None else f"{family}_{op}"
            declared[name] = ",".join(f"{n}:{k}" for n, k in metadata.params(family, op))
    built = {}
    for sig in itertools.count():
        name = ctypes.c_char_p()
        layout = lib.onnxopt_ops_signature(sig, ctypes.byref(name))
        if layout is None:
            break
        built[name.value.decode()] = layout.decode()
    assert built == declared


def _error() -> ctypes.Array:
    return ctypes.create_string_buffer(512)


def test_attention_tile_is_the_python_choice(lib):
    limits = [devices.for_capability(cc) for cc in ((8, 0), (8, 6), (8, 9), (9, 0), (12, 0))]
    limits += [devices.DeviceLimits((8, 6), 48 * 1024, 100 * 1024, 1536, 16, sm_count=0)]
    for dtype, head, limit, sq, heads in itertools.product(
            ("float16", "bfloat16", "float32"), (8, 64, 80, 128, 200, 256), limits,
            (1, 100, 4096), (1, 32)):
        limit = devices.DeviceLimits(limit.compute_capability, limit.smem_optin,
                                     limit.smem_per_sm, limit.threads_per_sm,
                                     limit.blocks_per_sm, sm_count=limit.sm_count or 108)
        err = _error()
        got = lib.onnxopt_ops_choose_attention(CODES[dtype], head, 0, limit.smem_optin,
                                               limit.sm_count, sq, heads, err)
        try:
            want = attention.select_variant(dtype, head, limit, sq=sq, batch_heads=heads)["entry"]
        except Exception as error:  # noqa: BLE001 - the same refusal, in the same words
            assert got is None and err.value.decode() == str(error)
            continue
        assert got is not None and got.decode() == want, (dtype, head, limit, sq, heads)


def test_norm_group_norm_and_activation_choices_are_the_python_ones(lib):
    aligned, misaligned = 0x1000, 0x1004
    for dtype, hidden, ptr in itertools.product(("float16", "bfloat16", "float32"),
                                                (1, 8, 36, 768, 4096, 8192, 16384, 40000),
                                                (aligned, misaligned)):
        threads, err = ctypes.c_int(), _error()
        got = lib.onnxopt_ops_choose_norm(CODES[dtype], hidden, int(ptr == aligned),
                                          ctypes.byref(threads), err)
        try:
            v, want_threads = norms.select_variant(dtype, hidden, ptr)
        except ValueError as error:
            assert got is None and err.value.decode() == str(error)
            continue
        assert (got.decode(), threads.value) == (v["entry"], want_threads)
    for dtype, (cg, spatial), ptr in itertools.product(
            ("float16", "float32"), ((4, 9), (16, 64 * 64), (40, 96 * 96), (1, 2 ** 29)),
            (aligned, misaligned)):
        threads = ctypes.c_int()
        got = lib.onnxopt_ops_choose_group_norm(CODES[dtype], cg * spatial, spatial,
                                                int(ptr == aligned), ctypes.byref(threads),
                                                _error())
        v, want_threads = norms.select_group_variant(dtype, cg * spatial, spatial, ptr)
        assert (got.decode(), threads.value) == (v["entry"], want_threads)
    for op, dtype, cols, ptr in itertools.product(("gelu", "swiglu"), ("float16", "float32"),
                                                  (1, 6, 64, 3072), (aligned, misaligned)):
        got = lib.onnxopt_ops_choose_activation(op.encode(), CODES[dtype], cols,
                                                int(ptr == aligned), _error())
        assert got.decode() == activations.select_variant(op, dtype, cols, ptr)["entry"]


def test_half_and_bfloat16_rounding_is_numpys(lib):
    rng = np.random.default_rng(0)
    with np.errstate(invalid="ignore", over="ignore"):
        _check_rounding(lib, rng)


def _check_rounding(lib, rng):
    values = np.concatenate([
        rng.standard_normal(20000).astype(np.float32) * 10.0 ** rng.integers(-9, 6, 20000),
        np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, 1e-8, 2.0 ** -25,
                  2.0 ** -24, 1.5 * 2.0 ** -24, 3e38, 6.1e-5, 5.96e-8], np.float32),
        # every float16 value, and the midpoints between neighbours (ties to even)
        np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32),
    ]).astype(np.float32)
    for code, dtype in ((10, np.float16), (16, ml_dtypes.bfloat16)):
        out = values.copy()
        lib.onnxopt_ops_round(code, out.ctypes.data, out.size)
        want = values.astype(dtype).astype(np.float32)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(out), nan)
        np.testing.assert_array_equal(out[~nan], want[~nan])
