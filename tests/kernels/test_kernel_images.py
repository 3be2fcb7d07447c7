"""Which shipped image a device loads (capabilities faked), the staleness check, and the loader
end to end with the driver and PyCUDA faked: shipped SASS or PTX where one covers the device,
PyCUDA's compiler only where none does. No GPU needed; the loader test needs nvcc (it loads
the images the session built)."""

from __future__ import annotations

import shutil

import pytest

from onnxopt.runtime.cuda import compiler, devices, images, loader, metadata, probe

SHIPPED = list(compiler.TARGETS)


@pytest.mark.parametrize(("cc", "target"), [
    ((8, 0), "sm_80"),
    ((8, 6), "sm_86"),
    ((8, 7), "sm_86"),  # Orin: SASS runs on a later minor of its major
    ((8, 9), "sm_89"),
    ((9, 0), "sm_90"),
    ((10, 0), "compute_90"),  # no SASS of major 10: the driver JIT-compiles the PTX
    ((12, 0), "compute_90"),
    ((7, 5), None),  # older than every image: nothing (the kernels need 8.0)
])
def test_choose_the_image_for_a_capability(cc, target):
    assert images.choose(cc, SHIPPED) == target


def test_choose_without_ptx_or_with_only_part_of_the_set():
    assert images.choose((10, 0), ["sm_80", "sm_90"]) is None
    assert images.choose((8, 9), ["sm_80", "sm_86"]) == "sm_86"
    assert images.choose((9, 0), ["sm_80", "compute_80"]) == "compute_80"


@pytest.fixture
def image_folder(built_images, tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    shutil.copytree(built_images[0], folder)
    monkeypatch.setenv("ONNXOPT_KERNEL_IMAGES", str(folder))
    images.clear_cache()
    yield folder
    images.clear_cache()


def test_find_checks_the_source_digest(image_folder, tmp_path, monkeypatch):
    found = images.find("flash_attention", (8, 6))
    assert found.target == "sm_86" and found.path.is_file()
    # The same images against an edited source: stale, never loaded.
    src = tmp_path / "src"
    shutil.copytree(metadata.kernels_dir(), src, ignore=shutil.ignore_patterns("bin"))
    (src / "layer_norm.cu").write_text((src / "layer_norm.cu").read_text() + "\n// edited\n")
    monkeypatch.setenv("ONNXOPT_KERNELS_DIR", str(src))
    metadata.load.cache_clear()
    try:
        assert images.find("layer_norm", (8, 6)) is None
        assert images.find("activations", (8, 6)).target == "sm_86"
    finally:
        metadata.load.cache_clear()


class FakeDriver:
    """The driver calls the loader makes, recorded; one context, one device of ``cc``."""

    def __init__(self, cc):
        self.cc = cc
        self.loaded: list[bytes] = []
        self.smem: dict[int, int] = {}

    def current_context(self):
        return 0xC0

    def current_device(self):
        return 0

    def load_module(self, image):
        self.loaded.append(image)
        return len(self.loaded)

    def get_function(self, module, name):
        return hash((module, name))

    def set_max_dynamic_smem(self, function, nbytes):
        self.smem[function] = nbytes


@pytest.fixture
def fake_device(monkeypatch):
    def make(cc):
        fake = FakeDriver(cc)
        for name in ("current_context", "current_device", "load_module", "get_function",
                     "set_max_dynamic_smem"):
            monkeypatch.setattr(loader.driver, name, getattr(fake, name))
        monkeypatch.setattr(probe, "limits", lambda ordinal=None: devices.for_capability(cc))
        compiled = []
        monkeypatch.setattr(loader.pycuda_backend, "compile_family",
                            lambda source, arch: compiled.append((source.stem, arch)) or b"x")
        monkeypatch.setattr(loader, "_modules", {})
        monkeypatch.setattr(loader, "_loaded", {})
        return fake, compiled

    return make


@pytest.mark.parametrize(("cc", "target"), [((8, 6), "sm_86"), ((8, 9), "sm_89"),
                                            ((9, 0), "sm_90"), ((12, 0), "compute_90")])
def test_loader_loads_the_shipped_image(image_folder, fake_device, cc, target):
    fake, compiled = fake_device(cc)
    kernel = loader.get("flash_attention", "fa_tc_f16_d128_bm64_bn64")
    assert kernel.target == target and not compiled
    assert fake.loaded == [(image_folder / compiler.image_name("flash_attention", target))
                           .read_bytes()]
    assert fake.smem[kernel.function] == 87040  # above 48 KiB: opted in
    loader.get("flash_attention", "fa_tc_f16_d64_bm64_bn64")
    assert len(fake.loaded) == 1  # one module per family and context


def test_loader_compiles_through_pycuda_only_when_no_image_covers(image_folder, fake_device):
    for path in image_folder.glob("layer_norm.*"):
        path.unlink()
    images.clear_cache()
    _, compiled = fake_device((8, 6))
    kernel = loader.get("layer_norm", "ln_f16_v8")
    assert compiled == [("layer_norm", "sm_86")] and kernel.target == "sm_86 (compiled)"
    assert loader.get("activations", "gelu_f16_v8").target == "sm_86"


def test_loader_refuses_a_tile_the_device_cannot_fit(image_folder, fake_device):
    fake_device((8, 6))
    with pytest.raises(loader.KernelUnsupported, match="104448 bytes of shared memory"):
        loader.get("flash_attention", "fa_tc_f16_d128_bm128_bn64")
