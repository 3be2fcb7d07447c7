"""What each GPU generation allows a kernel: the one table of real device limits.

Selection (is any tile of a kernel legal on every GPU the model may meet?), the tile choice at
load time (the largest tile this device fits) and the target's defaults all read this table;
nothing else states a shared-memory size. Numbers are those of the CUDA C++ Programming
Guide's "Technical Specifications per Compute Capability" table (``cudaDevAttr*`` names in
parentheses) and agree with what ``cuDeviceGetAttribute`` answers on the parts measured:

- ``smem_optin``: the most dynamic shared memory one block may opt into
  (``MAX_SHARED_MEMORY_PER_BLOCK_OPTIN``): 163 KiB on 8.0/8.7, 99 KiB on the consumer parts
  8.6/8.9/12.x, 227 KiB on 9.0/10.x. A launch above 48 KiB must opt in first.
- ``smem_per_sm``: shared memory per multiprocessor (``MAX_SHARED_MEMORY_PER_MULTIPROCESSOR``).
- ``threads_per_sm``, ``blocks_per_sm``, ``registers_per_sm``: occupancy limits.

A live device is described by the same record (``DeviceLimits.from_attributes``), so the
code that chooses a tile never asks whether the numbers came from the table or the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KIB = 1024
# Without the opt-in attribute a launch may use at most this much dynamic shared memory.
DEFAULT_SMEM_LIMIT = 48 * KIB


@dataclass(frozen=True)
class DeviceLimits:
    """One GPU generation's (or one probed device's) limits for a kernel launch."""

    compute_capability: tuple[int, int]
    smem_optin: int
    smem_per_sm: int
    threads_per_sm: int
    blocks_per_sm: int
    registers_per_sm: int = 64 * KIB
    sm_count: int = 0  # 0: unknown (a table row, not a device)
    name: str = ""

    @classmethod
    def from_attributes(cls, attrs: dict[str, int], name: str = "") -> DeviceLimits:
        """From driver attribute values (keys are ``CU_DEVICE_ATTRIBUTE_*`` names, lower-case,
        without the prefix), as the device probe reads them."""
        cc = (int(attrs["compute_capability_major"]), int(attrs["compute_capability_minor"]))
        row = for_capability(cc)
        return cls(
            compute_capability=cc,
            smem_optin=int(attrs.get("max_shared_memory_per_block_optin", row.smem_optin)),
            smem_per_sm=int(attrs.get("max_shared_memory_per_multiprocessor", row.smem_per_sm)),
            threads_per_sm=int(attrs.get("max_threads_per_multiprocessor", row.threads_per_sm)),
            blocks_per_sm=int(attrs.get("max_blocks_per_multiprocessor", row.blocks_per_sm)),
            registers_per_sm=int(attrs.get("max_registers_per_multiprocessor",
                                           row.registers_per_sm)),
            sm_count=int(attrs.get("multiprocessor_count", 0)),
            name=name,
        )


def _row(cc, optin_kib, per_sm_kib, threads, blocks, name) -> DeviceLimits:
    return DeviceLimits(cc, optin_kib * KIB, per_sm_kib * KIB, threads, blocks, name=name)


# Compute capability -> limits. Keep sorted; a capability missing here reads as the nearest
# lower row of its major version (for_capability).
TABLE: dict[tuple[int, int], DeviceLimits] = {
    row.compute_capability: row
    for row in (
        _row((7, 5), 64, 64, 1024, 16, "Turing (T4)"),
        _row((8, 0), 163, 164, 2048, 32, "Ampere datacenter (A100, A30)"),
        _row((8, 6), 99, 100, 1536, 16, "Ampere consumer (RTX 30xx, A10, A40)"),
        _row((8, 7), 163, 164, 2048, 16, "Jetson Orin"),
        _row((8, 9), 99, 100, 1536, 24, "Ada (RTX 40xx, L4, L40)"),
        _row((9, 0), 227, 228, 2048, 32, "Hopper (H100, H200)"),
        _row((10, 0), 227, 228, 2048, 32, "Blackwell datacenter (B200, GB200)"),
        _row((10, 3), 227, 228, 2048, 32, "Blackwell Ultra (B300)"),
        _row((12, 0), 99, 100, 1536, 32, "Blackwell consumer (RTX 50xx, RTX PRO)"),
        _row((12, 1), 99, 100, 1536, 32, "DGX Spark (GB10)"),
    )
}


def for_capability(cc: tuple[int, int]) -> DeviceLimits:
    """The row for ``cc``: exact, else the nearest lower minor of the same major (a 8.8 part
    reads as 8.7), else the most conservative row of the generations the kernels run on (8.0
    and newer; never an error: an unknown GPU gets limits that are safe, not fast)."""
    cc = (int(cc[0]), int(cc[1]))
    if cc in TABLE:
        return TABLE[cc]
    same_major = [k for k in TABLE if k[0] == cc[0] and k <= cc]
    if same_major:
        return replace(TABLE[max(same_major)], compute_capability=cc, name="")
    rows = [r for k, r in TABLE.items() if (8, 0) <= k <= cc] or list(TABLE.values())
    smallest = min(rows, key=lambda r: (r.smem_optin, r.threads_per_sm))
    return replace(smallest, compute_capability=cc, name="")


def portable_smem_limit(min_cc: tuple[int, int] = (8, 0)) -> int:
    """The largest per-block shared memory every GPU of ``min_cc`` or newer allows: what a
    kernel may rely on when the model is to run on any of them (99 KiB from 8.0 on)."""
    return min(r.smem_optin for cc, r in TABLE.items() if cc >= min_cc)
