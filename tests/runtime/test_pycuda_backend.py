"""What onnxopt asks of PyCUDA, checked against fake ``pycuda`` modules (PyCUDA cannot be
installed without a CUDA driver): compiling through its compiler and cache, attaching the
primary context, device attributes, memory; and the one device probe reading them."""

from __future__ import annotations

import sys
import types
from typing import ClassVar

import pytest

from onnxopt.runtime.cuda import devices, metadata, probe, pycuda_backend


class FakeContext:
    stack: ClassVar[list] = []

    def __init__(self, log):
        self.log = log

    def push(self):
        self.log.append("push")
        FakeContext.stack.append(self)

    @staticmethod
    def pop():
        FakeContext.stack.pop().log.append("pop")

    @staticmethod
    def synchronize():
        pass


class FakeDevice:
    ATTRS: ClassVar[dict[str, int]] = {"COMPUTE_CAPABILITY_MAJOR": 8, "COMPUTE_CAPABILITY_MINOR": 9,
             "MULTIPROCESSOR_COUNT": 128, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 101376,
             "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 102400,
             "MAX_THREADS_PER_MULTIPROCESSOR": 1536, "MAX_BLOCKS_PER_MULTIPROCESSOR": 24,
             "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536}
    log: ClassVar[list] = []

    def __init__(self, ordinal):
        self.ordinal = ordinal

    @staticmethod
    def count():
        return 1

    def name(self):
        return "Fake RTX 4090"

    def get_attribute(self, attribute):
        return self.ATTRS[attribute]

    def retain_primary_context(self):
        self.log.append(("retain", self.ordinal))
        return FakeContext(self.log)


@pytest.fixture
def fake_pycuda(monkeypatch):
    log: ClassVar[list] = []
    FakeDevice.log = log
    drv = types.ModuleType("pycuda.driver")
    drv.init = lambda: log.append("init")
    drv.Device = FakeDevice
    drv.Context = FakeContext
    drv.device_attribute = types.SimpleNamespace(**{k: k for k in FakeDevice.ATTRS})
    drv.mem_alloc = lambda n: log.append(("alloc", n)) or 0x1000
    compiler = types.ModuleType("pycuda.compiler")

    def compile(source, **kwargs):
        log.append(("compile", source[:40], kwargs))
        return b"cubin"

    compiler.compile = compile
    package = types.ModuleType("pycuda")
    package.driver, package.compiler = drv, compiler
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)
    monkeypatch.setitem(sys.modules, "pycuda.compiler", compiler)
    monkeypatch.setattr(pycuda_backend, "_initialised", set())
    probe.clear_cache()
    yield log
    probe.clear_cache()


def test_without_pycuda_the_reason_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    reason = pycuda_backend.available()
    assert reason is not None and "[cuda] extra" in reason


def test_compile_uses_pycudas_compiler_and_cache(fake_pycuda):
    source = metadata.source_path("layer_norm")
    assert pycuda_backend.compile_family(source, "sm_86") == b"cubin"
    (_, text, kwargs), = [e for e in fake_pycuda if e[0] == "compile"]
    assert text == source.read_text()[:40]
    assert kwargs["arch"] == "sm_86" and kwargs["no_extern_c"] is True
    assert "-DONNXOPT_SPEC_ALL" in kwargs["options"] and "-v" not in kwargs["options"]
    assert kwargs["include_dirs"] == [str(source.parent)]
    assert kwargs["cache_dir"].endswith("pycuda")


def test_attach_retains_and_pushes_the_primary_context_once(fake_pycuda):
    pycuda_backend.attach_primary(0)
    pycuda_backend.attach_primary(0)
    assert fake_pycuda.count(("retain", 0)) == 1
    assert fake_pycuda.count("push") == 2
    pycuda_backend.detach()  # what exit does for the main thread: PyCUDA's stack left empty
    assert fake_pycuda.count("pop") == 2 and not FakeContext.stack
    pycuda_backend.detach()
    assert fake_pycuda.count("pop") == 2


def test_the_probe_reads_device_attributes_through_pycuda(fake_pycuda):
    limits = probe.limits(0)
    assert limits.compute_capability == (8, 9) and limits.smem_optin == 101376
    assert limits.sm_count == 128 and limits.name == "Fake RTX 4090"
    assert limits == devices.DeviceLimits.from_attributes(
        {k.lower(): v for k, v in FakeDevice.ATTRS.items()}, name="Fake RTX 4090")
    assert probe.reason(3) == "no CUDA device 3"
    assert fake_pycuda.count("init") == 1


def test_memory_goes_through_pycuda(fake_pycuda):
    assert pycuda_backend.mem_alloc(0) == 0x1000
    assert ("alloc", 1) in fake_pycuda  # never a zero-byte allocation
