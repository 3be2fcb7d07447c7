"""The target context: what the machine and the user allow.

Legality checks and kernel selection read it; nothing else does. An optimize run builds
it once (:func:`run_target`, called by the pipeline driver) and hands the same one to
every stage, so stage 4 and stage 6 cannot disagree about it. The device is probed, not
trusted: onnxruntime-gpu lists ``CUDAExecutionProvider`` even on machines without a GPU,
so ``cuda`` is the default only when a CUDA device really answers. The probe and the
shared-memory numbers are the CUDA runtime's (``onnxopt.runtime.cuda.probe`` and
``.devices``): one probe, one table of device limits for the whole project.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxopt import ort_helper
from onnxopt.options import OptimizeOptions
from onnxopt.runtime.cuda import probe


@dataclass(frozen=True)
class Target:
    """Device kind, capability and policies a rewrite or kernel must respect."""

    device: str = "cpu"  # "cpu" | "cuda"
    compute_capability: tuple[int, int] = (0, 0)
    determinism: str = "relaxed"  # "strict" | "relaxed"
    shared_memory_bytes: int = 0
    ort_version: tuple[int, int] = (1, 31)
    opset: int = 21

    @property
    def provider(self) -> str:
        return "CUDAExecutionProvider" if self.device == "cuda" else "CPUExecutionProvider"


def installed_ort_version() -> tuple[int, int]:
    """(major, minor) of the installed ONNX Runtime, as the ORT helper found it (the parent
    does not load ORT for it: :mod:`onnxopt.ort_helper`)."""
    try:
        major, minor = (ort_helper.facts().version or "").split(".")[:2]
        return (int(major), int(minor))
    except ValueError:  # no ORT, or a version it does not spell: the one we were built against
        return (1, 31)


def run_target(options: OptimizeOptions, model_opset: int) -> Target:
    """The one target of an optimize run: the user's options, the machine probed for what
    they leave open, and as the opset bound ``--opset`` or else the model's own (onnxopt never
    converts a model's opset, so an emitted kernel may need no newer one)."""
    return make_target(options.target, determinism=options.determinism,
                       ort_version=options.ort_version, opset=options.opset or max(model_opset, 1))


def make_target(device: str | None = None, *, determinism: str = "relaxed",
                ort_version: str | None = None, opset: int | None = None) -> Target:
    """Build the target from user options, probing the machine for what was left open
    (``opset`` left open: the :class:`Target` default).

    A CUDA target on a machine whose GPU answers takes that GPU's capability and per-block
    shared memory; without one (optimizing for another machine) the capability is 8.0 and
    the shared memory is left 0, which selection reads as "any GPU the kernels run on"."""

    limits = probe.device()
    cc = None if limits is None else limits.compute_capability
    if device is None:
        device = "cuda" if cc is not None else "cpu"
    if ort_version:
        major, minor = ort_version.split(".")[:2]
        ort = (int(major), int(minor))
    else:
        ort = installed_ort_version()
    return Target(
        device=device,
        compute_capability=cc or ((8, 0) if device == "cuda" else (0, 0)),
        determinism=determinism,
        shared_memory_bytes=limits.smem_optin if device == "cuda" and limits is not None else 0,
        ort_version=ort,
        opset=opset or Target.opset,
    )
