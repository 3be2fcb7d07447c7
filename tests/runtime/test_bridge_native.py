"""The shim: found when installed, else built once into the cache, and safe when loaded bare."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

from onnxopt.runtime import native


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_fallback_build_is_cached_by_source_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = native._compile_into_cache()
    assert first.parent == tmp_path / "onnxopt"
    assert first.name.startswith("libonnxopt_shim-") and first.suffix == ".so"
    stamp = first.stat().st_mtime_ns
    assert native._compile_into_cache() == first and first.stat().st_mtime_ns == stamp
    lib = ctypes.CDLL(str(first))
    assert lib.RegisterCustomOps and lib.onnxopt_set_register_callback
    assert native._built_from(lib) == native.source_hash()
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temporary files left


def test_a_session_runs_on_the_fallback_build(tmp_path):
    """A source tree with no installed library still works: the shim is compiled on first use."""
    result = _run(
        """
        import numpy as np, onnx.parser
        from onnxopt.runtime import native, cpu_kernel, session, KernelRegistry
        native._installed_library = lambda: None
        reg = KernelRegistry()
        @cpu_kernel("ai.t", "Inc", inputs=["x: float32"], outputs=["y: float32"], registry=reg)
        def inc(x):
            return x + 1
        m = onnx.parser.parse_model('<ir_version: 10, opset_import: ["": 21, "ai.t": 1]>'
                                    'g (float[N] x) => (float[N] y) { y = ai.t.Inc (x) }')
        print(session(m, registry=reg).run(None, {"x": np.zeros(2, np.float32)})[0].tolist())
        print(native.load().path)
    """,
        {"XDG_CACHE_HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    values, path = result.stdout.split("\n")[:2]
    assert values == "[1.0, 1.0]"
    assert path.startswith(str(tmp_path / "onnxopt"))


def test_a_library_built_from_another_source_is_not_used(tmp_path):
    """An editable install whose shim.c changed since the build: the stale library is passed over."""
    result = _run(
        """
        from onnxopt.runtime import native
        native.source_hash = lambda: "0123456789abcdef"
        shim = native.load()
        print(shim.path)
        print(native._built_from(shim.lib))
    """,
        {"XDG_CACHE_HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    path, built_from = result.stdout.split("\n")[:2]
    assert path == str(tmp_path / "onnxopt" / "libonnxopt_shim-0123456789abcdef.so")
    assert built_from == "0123456789abcdef"


def test_shim_registered_without_onnxopt_fails_cleanly():
    """Loading the library straight into ORT (no callback installed) gives an error, not a crash."""
    path = native.load().path
    result = _run(
        f"""
        import onnxruntime as ort
        try:
            ort.SessionOptions().register_custom_ops_library({path!r})
        except Exception as error:
            print("refused:", error)
    """,
        {},
    )
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "onnxopt.runtime.session()" in result.stdout


def test_missing_compiler_is_explained(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "")
    monkeypatch.setattr(native.shutil, "which", lambda name: None)
    with pytest.raises(native.ShimBuildError, match="no C compiler"):
        native._compile_into_cache()
