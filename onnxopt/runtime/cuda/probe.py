"""The one CUDA device probe: is there a device, and what are its real limits?

Used by the optimizer's target (``onnxopt.legality.target.make_target``), by "can onnxopt's
CUDA kernels run here" (``onnxopt.runtime.cuda_available``) and by the tile choice at load
time. Device attributes come from PyCUDA (``Device.get_attribute``) where it is installed; a
machine without the ``[cuda]`` extra is probed through the driver library directly, so the
optimizer still sees its GPU (the kernels themselves then say that PyCUDA is missing).
Answers are cached per device for the life of the process.
"""

from __future__ import annotations

import functools
import os

from . import driver, pycuda_backend
from .devices import DeviceLimits


class NoDevice(RuntimeError):
    """No CUDA device answers; the message says what is missing."""


def default_ordinal() -> int:
    """$ONNXOPT_CUDA_DEVICE, else 0."""
    return int(os.environ.get("ONNXOPT_CUDA_DEVICE", "0") or 0)


def limits(ordinal: int | None = None) -> DeviceLimits:
    """The limits of device ``ordinal`` (default ``default_ordinal()``); raises NoDevice."""
    answer = _probe(default_ordinal() if ordinal is None else ordinal)
    if isinstance(answer, str):
        raise NoDevice(answer)
    return answer


@functools.lru_cache(maxsize=16)
def _probe(ordinal: int) -> DeviceLimits | str:
    """The device's limits, or why there is none (cached either way: the answer does not
    change while the process runs)."""
    if pycuda_backend.available() is None:
        if ordinal >= pycuda_backend.device_count():
            return f"no CUDA device {ordinal}"
        attrs = pycuda_backend.device_attributes(ordinal)
        return DeviceLimits.from_attributes(attrs, name=str(attrs.get("name", "")))
    try:
        if ordinal >= driver.device_count():
            return f"no CUDA device {ordinal}" if ordinal else "no CUDA device is visible"
        return DeviceLimits.from_attributes(driver.device_attributes(ordinal))
    except driver.CudaUnavailable as error:
        return str(error)
    except (driver.CudaError, OSError) as error:
        return f"the CUDA driver cannot be initialised ({error})"


def clear_cache() -> None:
    """Forget what was probed (tests that fake a device)."""
    _probe.cache_clear()


def device(ordinal: int | None = None) -> DeviceLimits | None:
    """``limits(ordinal)``, or None when no device answers (never raises)."""
    try:
        return limits(ordinal)
    except NoDevice:
        return None


def reason(ordinal: int | None = None) -> str | None:
    """None when device ``ordinal`` answers, else why not."""
    try:
        limits(ordinal)
    except NoDevice as error:
        return str(error)
    return None
