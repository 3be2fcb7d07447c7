"""Everything onnxopt asks of PyCUDA, in one place, imported lazily.

PyCUDA is the ``[cuda]`` extra: it installs only where a CUDA driver exists, and importing
``pycuda.driver`` needs ``libcuda``. So nothing imports this module's PyCUDA calls at load
time; each function imports what it needs when called, and a machine without PyCUDA gets a
``PyCudaUnavailable`` with the reason. Tests replace the ``pycuda`` modules with fakes
(``sys.modules``) to check what is asked of them without a GPU.

What PyCUDA does here, because it has the API:

- **compiling** a kernel family for an architecture that no shipped image covers
  (``pycuda.compiler.compile``, with its on-disk cache keyed by source, options and nvcc);
- **context attachment**: when a thread has no current context (the staged path, tests,
  benchmarks), the device's *primary* context is retained and pushed
  (``Device.retain_primary_context``); ONNX Runtime's CUDA provider, PyTorch and CuPy use that
  same context, so device pointers and loaded modules are shared with them;
- **device attributes** (``Device.get_attribute``): the limits the tile choice reads;
- **device memory** for the staged path and the GPU tests (``mem_alloc``, copies, memset).

What it cannot do is in ``driver.py`` (ctypes), each place saying why: launching on a stream
PyCUDA did not create (ONNX Runtime's compute stream), and so loading the module whose
function handle that launch needs (PyCUDA's ``Module``/``Function`` do not expose their
``CUmodule``/``CUfunction``).
"""

from __future__ import annotations

import atexit
import importlib
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from .compiler import NVCC_FLAGS
from .compiler import cache_dir as base

# The attributes the probe reads, as PyCUDA's device_attribute names (CU_DEVICE_ATTRIBUTE_*).
ATTRIBUTES = (
    "COMPUTE_CAPABILITY_MAJOR",
    "COMPUTE_CAPABILITY_MINOR",
    "MULTIPROCESSOR_COUNT",
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "MAX_THREADS_PER_MULTIPROCESSOR",
    "MAX_BLOCKS_PER_MULTIPROCESSOR",
    "MAX_REGISTERS_PER_MULTIPROCESSOR",
)


class PyCudaUnavailable(RuntimeError):
    """PyCUDA is not installed, or cannot initialise (no driver)."""


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise PyCudaUnavailable(
            f"PyCUDA is not usable here ({error}); install onnxopt's [cuda] extra "
            "(pip install 'onnxopt[cuda]') on a machine with a CUDA driver"
        ) from None


def driver() -> ModuleType:
    """``pycuda.driver``, initialised once."""
    drv = _import("pycuda.driver")
    _init(drv)
    return drv


_init_lock = threading.Lock()
_initialised: set[int] = set()


def _init(drv: ModuleType) -> None:
    if id(drv) in _initialised:
        return
    with _init_lock:
        if id(drv) not in _initialised:
            try:
                drv.init()
            except Exception as error:  # noqa: BLE001 - pycuda raises its own LogicError etc.
                raise PyCudaUnavailable(f"the CUDA driver cannot be initialised ({error})") \
                    from None
            _initialised.add(id(drv))


def available() -> str | None:
    """None when PyCUDA imports and initialises, else the reason."""
    try:
        driver()
    except PyCudaUnavailable as error:
        return str(error)
    return None


def device_count() -> int:
    return int(driver().Device.count())


def device_attributes(ordinal: int) -> dict[str, Any]:
    """``{"compute_capability_major": 9, ...}`` for device ``ordinal``, plus ``"name"``."""
    drv = driver()
    dev = drv.Device(ordinal)
    attrs: dict[str, Any] = {"name": dev.name()}
    for name in ATTRIBUTES:
        attribute = getattr(drv.device_attribute, name, None)
        if attribute is not None:  # an older PyCUDA may lack a newer attribute: use the table
            attrs[name.lower()] = int(dev.get_attribute(attribute))
    return attrs


# Contexts pushed by attach_primary, one per (thread, device): kept so they stay retained, and
# popped again when the thread's work is done (detach) or, for the main thread, at exit: PyCUDA
# aborts the process at exit ("context stack was not empty", exit 134) if any is left pushed.
_attached = threading.local()


def attach_primary(ordinal: int) -> None:
    """Make device ``ordinal``'s primary context current in this thread (retained by PyCUDA,
    pushed on its context stack, popped by ``detach`` or at exit). Call only where no context
    is current: ONNX Runtime's compute callbacks already run in its (primary) context."""
    drv = driver()
    contexts = getattr(_attached, "contexts", None)
    if contexts is None:
        contexts = _attached.contexts = {}
        if threading.current_thread() is threading.main_thread():
            atexit.register(detach)
    if ordinal in contexts:
        contexts[ordinal].push()
        _attached.pushed = getattr(_attached, "pushed", 0) + 1
        return
    ctx = drv.Device(ordinal).retain_primary_context()
    ctx.push()
    contexts[ordinal] = ctx
    _attached.pushed = getattr(_attached, "pushed", 0) + 1


def detach() -> None:
    """Pop every context ``attach_primary`` pushed in this thread (the retained primary
    contexts are released with the last reference)."""
    pushed = getattr(_attached, "pushed", 0)
    if not pushed:
        return
    drv = driver()
    for _ in range(pushed):
        drv.Context.pop()
    _attached.pushed = 0
    _attached.contexts = {}


def cache_dir() -> Path:
    """Where PyCUDA's compiler caches cubins for onnxopt (beside onnxopt's other caches)."""

    return base().parent / "pycuda"


def compile_family(source: Path, arch: str, *, options: tuple[str, ...] = ()) -> bytes:
    """A cubin of every entry point of ``source`` for ``arch`` (``sm_XY``), through PyCUDA's
    compiler and cache. The sources declare their entry points ``extern "C"`` themselves."""

    compiler = _import("pycuda.compiler")
    flags = [f for f in NVCC_FLAGS if f not in ("-Xptxas", "-v")]
    return compiler.compile(
        Path(source).read_text(),
        options=[*flags, "-DONNXOPT_SPEC_ALL", *options],
        arch=arch,
        include_dirs=[str(Path(source).parent)],
        no_extern_c=True,
        cache_dir=str(cache_dir()),
    )


# --- device memory (staged path, GPU tests) ---------------------------------------------------


def mem_alloc(nbytes: int) -> Any:
    """A PyCUDA ``DeviceAllocation``; ``int(allocation)`` is the device pointer."""
    return driver().mem_alloc(max(int(nbytes), 1))


def memcpy_htod(dst: int, host: Any) -> None:
    driver().memcpy_htod(int(dst), host)


def memcpy_dtoh(host: Any, src: int) -> None:
    driver().memcpy_dtoh(host, int(src))


def memset_d8(dst: int, value: int, nbytes: int) -> None:
    driver().memset_d8(int(dst), value, nbytes)


def synchronize() -> None:
    driver().Context.synchronize()
