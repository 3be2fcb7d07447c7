"""Kernel arguments packed from the family's declared parameter list, by name.

The parameter order is stated once, in ``kernels/<family>.json`` ("params"; the tests check it
against the ``.cu`` signature): a launch wrapper passes a dict of named values, and this
module orders and converts them for ``cuLaunchKernel``. A missing or unknown name is an error,
so a wrapper cannot silently pass arguments in the wrong order.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

from . import metadata


def _ptr(v: Any) -> ctypes.c_uint64:
    return ctypes.c_uint64(int(v or 0))


def _i32(v: Any) -> ctypes.c_int32:
    v = int(v)
    if not -(2**31) <= v < 2**31:
        raise OverflowError(f"{v} does not fit in int32")
    return ctypes.c_int32(v)


def _i64(v: Any) -> ctypes.c_int64:
    return ctypes.c_int64(int(v))


def _f32(v: Any) -> ctypes.c_float:
    return ctypes.c_float(float(v))


CTYPES = {"ptr": _ptr, "i32": _i32, "i64": _i64, "f32": _f32}


def pack(family: str, values: Mapping[str, Any], op: str | None = None) -> list:
    """ctypes scalars in the declared order of ``family`` (``op``'s signature if it has
    several); ``values`` must name every parameter and nothing else."""
    declared = metadata.params(family, op)
    names = [name for name, _ in declared]
    missing = [n for n in names if n not in values]
    extra = [n for n in values if n not in names]
    if missing or extra:
        raise TypeError(f"{family}{'/' + op if op else ''} arguments: missing {missing}, "
                        f"unknown {extra}")
    return [CTYPES[kind](values[name]) for name, kind in declared]
